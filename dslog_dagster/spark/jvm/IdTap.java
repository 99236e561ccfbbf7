/*
 * The id tap of dslog-dagster's Spark capture (see dslog_dagster/spark/idtap.py).
 *
 * A nondeterministic SQL function tap(dir, key, id) that returns id and, on the executor,
 * remembers (key, id) for the running task. When the task succeeds its pairs are written to
 * <dir>/tap-<stage>-<partition>.bin (published by an atomic rename, so a retried or
 * speculative attempt replaces its partition's file and a failed attempt leaves none):
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
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.api.java.UDF3;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.types.DataTypes;

public final class IdTap implements UDF3<String, Long, Long, Long> {
  private static final long serialVersionUID = 1L;

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
  public static void register(SparkSession spark, String name) {
    UserDefinedFunction f =
        org.apache.spark.sql.functions.udf(new IdTap(), DataTypes.LongType).asNondeterministic();
    spark.udf().register(name, f);
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
    String lastDir;
    Buf last;

    Task(long attempt) {
      this.attempt = attempt;
    }
  }

  @Override
  public Long call(String dir, Long key, Long id) {
    if (id == null || dir == null) {
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
    Buf b;
    if (dir.equals(t.lastDir)) {
      b = t.last;
    } else {
      b = t.bufs.computeIfAbsent(dir, d -> new Buf());
      t.lastDir = dir;
      t.last = b;
    }
    long v = id.longValue();
    if (key == null) {
      b.add(0L, ~v);
    } else {
      b.add(key.longValue(), v);
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
