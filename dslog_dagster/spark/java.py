"""The Java tools Spark runs on, found the way Spark finds them.

Both the session (which needs a ``java`` to start the JVM) and the id tap (which compiles its
recorder with ``javac``) look them up; the lookup lives here so neither imports the other for it.
"""

import os
import shutil

from dslog_dagster.errors import SparkUnavailableError

__all__ = ["java_tool", "require_java"]


def java_tool(name: str) -> str | None:
    """A JDK/JRE executable (``java``, ``javac``) as Spark finds Java: under ``JAVA_HOME``,
    else on ``PATH``; None when there is none."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", name), os.X_OK):
        return os.path.join(home, "bin", name)
    return shutil.which(name)


def require_java() -> str:
    """The ``java`` executable Spark will use.

    Raises:
        SparkUnavailableError: no Java runtime is installed or on ``PATH``.
    """
    java = java_tool("java")
    if java is None:
        msg = (
            "Spark needs a Java runtime (Java 17), but `java` is not on PATH and JAVA_HOME is "
            "not set. Install it (Debian/Ubuntu: `apt-get install openjdk-17-jre-headless`) or "
            "set JAVA_HOME; `tools/check-prereqs.sh` checks all prerequisites."
        )
        raise SparkUnavailableError(msg)
    return java
