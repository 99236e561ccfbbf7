/*
 * The id tap of dslog-dagster's Spark capture (see dslog_dagster/spark/idtap.py).
 *
 * A nondeterministic SQL function tap(token, key, key_is_null, id) that returns id and, on the
 * executor, remembers (key, id) for the running task. It is registered in the session's
 * function registry as a StaticInvoke of record(): the stage's generated code calls the
 * static method with primitive arguments (no boxing, no type converters, ~5 ns a row, where
 * a Java UDF cost ~75 ns); a null id returns null without a call. The token names a directory through the job's
 * local property "dslog.idtap.<token>" (set by the capture's thread on the driver): a
 * constant token keeps the stage's generated code the same from one capture to the next, so
 * Spark's code cache serves it, and converting a directory string per row is avoided. When
 * the task succeeds its pairs are written to <dir>/tap-<stage>-<partition>.bin (published by
 * an atomic rename, so a retried or speculative attempt replaces its partition's file and a
 * failed attempt leaves none); a task without the property records nothing:
 *
 *   int64 n | int64 keys[n] | int64 ids[n]        (little endian)
 *
 * where a row whose key is null stores ~id (ids are dense row ids, never negative).
 *
 * Placed under an aggregation, it records which input rows fell into which group as the rows
 * stream through the map side of the shuffle, where the rows already are: the capture then
 * finds the ids of groups whose range summary failed without computing the aggregation's
 * input again (Titian's idea of capturing at the stage boundary, here persisted to files the
 * capture compresses and deletes).
 */
package dslog.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.objects.StaticInvoke;
import org.apache.spark.sql.types.AbstractDataType;
import org.apache.spark.sql.types.DataTypes;
import scala.Option;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction1;

public final class IdTap {
  /** Prefix of the local properties that name the tokens' directories. */
  public static final String PROPERTY = "dslog.idtap.";


  /** The buffers of each running task attempt (a task's rows may be evaluated by a thread
   * other than its own, e.g. one that feeds a Python worker). */
  private static final ConcurrentHashMap<Long, Task> TASKS = new ConcurrentHashMap<>();

  /** The task attempt this thread last tapped for (saves the map lookup per row). */
  private static final ThreadLocal<Task> TASK = new ThreadLocal<>();

  /**
   * Registers the function under {@code name} in the session (one name per session: the
   * generated code of a stage names the function, so a new name per capture would make Spark
   * compile every stage again).
   */
  public static void register(org.apache.spark.sql.classic.SparkSession spark, String name) {
    spark.sessionState().functionRegistry().createOrReplaceTempFunction(name, new Builder(), "java_udf");
  }

  private static final class Builder extends AbstractFunction1<Seq<Expression>, Expression> {
    @Override
    public Expression apply(Seq<Expression> args) {
      if (args.size() != 4) {
        throw new IllegalArgumentException(
            "dslog id tap takes (token int, key bigint, key_is_null boolean, id bigint)");
      }
      java.util.List<AbstractDataType> types =
          Arrays.asList(
              DataTypes.IntegerType, DataTypes.LongType, DataTypes.BooleanType, DataTypes.LongType);
      Seq<AbstractDataType> inputTypes = CollectionConverters.asScala(types).toList();
      return new StaticInvoke(
          IdTap.class, DataTypes.LongType, "record", args, inputTypes, true, true, false,
          Option.empty());
    }
  }

  private static final class Buf {
    long[] keys = new long[1 << 12];
    long[] ids = new long[1 << 12];
    int n;

    void add(long key, long id) {
      if (n == keys.length) {
        keys = Arrays.copyOf(keys, n * 2);
        ids = Arrays.copyOf(ids, n * 2);
      }
      keys[n] = key;
      ids[n] = id;
      n++;
    }
  }

  private static final class Task {
    final long attempt;
    final HashMap<String, Buf> bufs = new HashMap<>();
    Buf[] byToken = new Buf[4];
    boolean[] resolved = new boolean[4];

    Task(long attempt) {
      this.attempt = attempt;
    }
  }

  /** Records (key, id) for the running task under token's directory; returns id. */
  public static long record(int token, long key, boolean keyIsNull, long id) {
    if (token < 0) {
      return id;
    }
    TaskContext ctx = TaskContext.get();
    if (ctx == null) { // evaluated outside a task (never in a capture's pass): nothing to keep
      return id;
    }
    Task t = TASK.get();
    if (t == null || t.attempt != ctx.taskAttemptId()) {
      t = TASKS.computeIfAbsent(ctx.taskAttemptId(), a -> start(ctx, a));
      TASK.set(t);
    }
    int i = token;
    if (i >= t.byToken.length) {
      t.byToken = Arrays.copyOf(t.byToken, i + 1);
      t.resolved = Arrays.copyOf(t.resolved, i + 1);
    }
    if (!t.resolved[i]) {
      String dir = ctx.getLocalProperty(PROPERTY + i);
      t.byToken[i] = dir == null ? null : t.bufs.computeIfAbsent(dir, d -> new Buf());
      t.resolved[i] = true;
    }
    Buf b = t.byToken[i];
    if (b == null) {
      return id;
    }
    if (keyIsNull) {
      b.add(0L, ~id);
    } else {
      b.add(key, id);
    }
    return id;
  }

  private static Task start(TaskContext ctx, long attempt) {
    final Task t = new Task(attempt);
    ctx.addTaskCompletionListener(
        c -> {
          TASKS.remove(attempt);
          if (TASK.get() == t) {
            TASK.remove();
          }
          if (!c.isFailed()) {
            for (Map.Entry<String, Buf> e : t.bufs.entrySet()) {
              write(c, e.getKey(), e.getValue());
            }
          }
        });
    return t;
  }

  private static void write(TaskContext c, String dir, Buf b) {
    String base = "tap-" + c.stageId() + "-" + c.partitionId();
    Path tmp = Paths.get(dir, "." + base + "-" + c.taskAttemptId() + ".tmp");
    ByteBuffer bb = ByteBuffer.allocate(8 * (1 + 2 * b.n)).order(ByteOrder.LITTLE_ENDIAN);
    bb.putLong(b.n);
    bb.asLongBuffer().put(b.keys, 0, b.n);
    bb.position(8 + 8 * b.n);
    bb.asLongBuffer().put(b.ids, 0, b.n);
    bb.position(0);
    try {
      try (FileChannel ch =
          FileChannel.open(
              tmp,
              StandardOpenOption.CREATE,
              StandardOpenOption.WRITE,
              StandardOpenOption.TRUNCATE_EXISTING)) {
        while (bb.hasRemaining()) {
          ch.write(bb);
        }
      }
      Files.move(
          tmp,
          Paths.get(dir, base + ".bin"),
          StandardCopyOption.REPLACE_EXISTING,
          StandardCopyOption.ATOMIC_MOVE);
    } catch (IOException e) {
      // the capture sees the missing file (its counts do not match) and finds the ids by a
      // join instead; failing the user's task for it would lose more than it saves
      try {
        Files.deleteIfExists(tmp);
      } catch (IOException ignored) {
        // nothing left to do
      }
    }
  }
}
