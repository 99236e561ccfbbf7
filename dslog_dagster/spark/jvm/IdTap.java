/*
 * The id tap of dslog-dagster's Spark capture (see dslog_dagster/spark/idtap.py).
 *
 * A nondeterministic SQL function tap(token, key, key_is_null, id) that returns id and, on the
 * executor, remembers (key, id) for the running task. It is registered in the session's
 * function registry as a StaticInvoke of record(): the stage's generated code calls the
 * static method with primitive arguments (no boxing, no type converters; a Java UDF cost
 * ~15x more per row); a null id returns null without a call.
 *
 * The token names a directory through the job's local property "dslog.idtap.<token>" (set by
 * the capture's thread on the driver): a constant token keeps the stage's generated code the
 * same from one capture to the next, so Spark's code cache serves it. A task without the
 * property records nothing. When the task succeeds its pairs are in
 * <dir>/tap-<stage>-<partition>.bin, published by an atomic rename (a retried or speculative
 * attempt replaces its partition's file; a failed attempt leaves none). The file is a
 * sequence of chunks of at most CHUNK single rows and CHUNK runs, so a task's memory stays
 * bounded (little endian):
 *
 *   ( int64 n | int64 g | int64 kw | int64 iw | keys[g] | int32 rows[g] if g < n | ids[n]
 *     | zero padding to 8 bytes | int64 m | int64 rkeys[m] | int64 first[m] | int64 len[m] )*
 *
 * The n single rows come as g key segments: consecutive rows of one key and one null-ness,
 * segment j holding rows[j] of them (g = n: one row each, no rows[] stored; the writer stores
 * segments only when there are at most n / 2 of them). Keys take kw bytes and ids iw bytes
 * each, 4 or 8 (signed): 4 when every key, or every id, of the chunk fits. A row whose key is
 * null stores key 0 and ~id (ids are dense row ids, never negative). Run j stands for the rows
 * (rkeys[j], first[j] + i) for i in [0, len[j]) when len[j] > 0, or (rkeys[j], first[j])
 * repeated -len[j] times when len[j] < 0: consecutive rows of one key with consecutive ids
 * (rows clustered by id) or with one id (a row of the other side of a join, repeated for each
 * of its matches) cost a run per group instead of a row each.
 *
 * A second function, summary(token, key, key_is_null, lo, hi, ok, n), returns lo and records a
 * group's summary once per group where the aggregation finishes it (it is placed over the
 * aggregate functions), so the summary need not travel with the rows to the output: the
 * capture looks it up by the group key. (Where the tap runs, the capture passes lo = hi = 0
 * and ok = false, computing no range: the group's ids come from the tap and its count n is
 * what the tapped rows must add up to.) Its files are
 * <dir>/sum-<stage>-<partition>.bin, published like the tap's, of chunks
 *
 *   ( int64 c | int64 w[5] | keys[c] | lo[c] | hi[c] | n[c] | flags[c]
 *     | zero padding to 8 bytes )*
 *
 * with flags bit 0 = key is null (key stored as 0), bit 1 = ok; column i's values take w[i]
 * bytes each (signed, little endian): 0 when every one of the chunk is 0 (nothing stored), 4
 * when every one fits an int, else 8.
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

  /** Each thread's spill buffer (see Sink.buffer). */
  private static final ThreadLocal<ByteBuffer> SPILL = new ThreadLocal<>();

  /**
   * Registers the function under {@code name} in the session (one name per session: the
   * generated code of a stage names the function, so a new name per capture would make Spark
   * compile every stage again).
   */
  public static void register(org.apache.spark.sql.classic.SparkSession spark, String name) {
    spark
        .sessionState()
        .functionRegistry()
        .createOrReplaceTempFunction(name, new Builder(), "java_udf");
    spark
        .sessionState()
        .functionRegistry()
        .createOrReplaceTempFunction(name + "_sum", new SummaryBuilder(), "java_udf");
  }

  private static final class SummaryBuilder
      extends AbstractFunction1<Seq<Expression>, Expression> {
    @Override
    public Expression apply(Seq<Expression> args) {
      if (args.size() != 7) {
        throw new IllegalArgumentException(
            "dslog summary takes (token int, key bigint, key_is_null boolean, lo bigint, "
                + "hi bigint, ok boolean, n bigint)");
      }
      java.util.List<AbstractDataType> types =
          Arrays.asList(
              DataTypes.IntegerType,
              DataTypes.LongType,
              DataTypes.BooleanType,
              DataTypes.LongType,
              DataTypes.LongType,
              DataTypes.BooleanType,
              DataTypes.LongType);
      Seq<AbstractDataType> inputTypes = CollectionConverters.asScala(types).toList();
      // null-propagating: a group without ids of the slot (lo null) returns null unrecorded
      return new StaticInvoke(
          IdTap.class, DataTypes.LongType, "summary", args, inputTypes, true, true, false,
          Option.empty());
    }
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

  /**
   * Records (pairs, runs, summaries) kept in memory per directory and task before they are
   * appended to the file; the local property "dslog.idtap.chunk" sets another size. Small
   * enough that a task's buffers (16 bytes a pair, per tapped slot) stay in the core's cache:
   * with 2^16 the buffers crowded the aggregation's hash map out of it, and the map stage of
   * the bench's shuffled pipeline (10^6 rows, two slots) took 5–25 ms more CPU than with 2^12
   * to 2^14 (four in-process comparisons, chunk sizes alternating); more spills cost nothing
   * measurable.
   */
  static final int CHUNK = 1 << 13;

  /**
   * A task attempt's records for one directory: buffered up to the chunk size, appended to the
   * attempt's temporary file chunk by chunk (so a task's memory stays bounded), and published
   * by an atomic rename when the task succeeds (a retried or speculative attempt replaces its
   * partition's file; a failed attempt leaves none).
   */
  private abstract static class Sink {
    final Path tmp;
    final Path done;
    final int chunk;
    private FileChannel ch;
    private boolean broken;

    Sink(String dir, TaskContext c, String kind) {
      String base = kind + "-" + c.stageId() + "-" + c.partitionId();
      this.tmp = Paths.get(dir, "." + base + "-" + c.taskAttemptId() + ".tmp");
      this.done = Paths.get(dir, base + ".bin");
      String size = c.getLocalProperty(PROPERTY + "chunk");
      this.chunk = size == null ? CHUNK : Math.max(1, Integer.parseInt(size));
    }

    /** Appends the buffered records to the file and empties the buffers. */
    abstract void spill();

    /** Writes whatever is still buffered (at the end of a successful task). */
    abstract void flush();

    /**
     * The array length that holds one more entry after {@code used} in arrays of
     * {@code length}: the same while there is room; doubled up to the chunk size; at the chunk
     * size the chunk is spilled first (which empties every buffer of the sink).
     */
    final int room(int used, int length) {
      if (used < length) {
        return length;
      }
      if (used >= chunk) {
        spill();
        return length;
      }
      return (int) Math.min((long) chunk, 2L * used);
    }

    /** A little-endian buffer of at least {@code bytes}: the spilling thread's, reused by every
     * sink it spills (a new zeroed one per spill cost as much as the copy into it). Direct,
     * so the channel writes it as it is (a heap buffer is first copied into a temporary
     * direct one); filled and written within one spill, so a thread's spills never share it.
     */
    static ByteBuffer buffer(int bytes) {
      ByteBuffer out = SPILL.get();
      if (out == null || out.capacity() < bytes) {
        out = ByteBuffer.allocateDirect(Math.max(bytes, 8 * (2 + 2 * CHUNK + 3 * 1024)));
        out.order(ByteOrder.LITTLE_ENDIAN);
        SPILL.set(out);
      }
      out.clear();
      out.limit(bytes);
      return out;
    }

    /** Puts v into bb in width bytes (4: v fits an int; 8). */
    static void putValue(ByteBuffer bb, long v, int width) {
      if (width == 4) {
        bb.putInt((int) v);
      } else {
        bb.putLong(v);
      }
    }

    /** Appends bb (from position 0) to the temporary file, opened on first use. */
    final void write(ByteBuffer bb) {
      if (broken) {
        return;
      }
      try {
        if (ch == null) {
          ch =
              FileChannel.open(
                  tmp,
                  StandardOpenOption.CREATE,
                  StandardOpenOption.WRITE,
                  StandardOpenOption.TRUNCATE_EXISTING);
        }
        bb.position(0);
        while (bb.hasRemaining()) {
          ch.write(bb);
        }
      } catch (IOException e) {
        // the capture finds the file missing (counts that do not match, groups without a
        // summary) and falls back; failing the user's task for it would lose more than it saves
        broken = true;
      }
    }

    /** Publishes the file (success) or removes it (failure). */
    final void finish(boolean ok) {
      if (ok) {
        flush();
      }
      try {
        if (ch != null) {
          ch.close();
        }
        if (ok && !broken && ch != null) {
          Files.move(
              tmp, done, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        } else {
          Files.deleteIfExists(tmp);
        }
      } catch (IOException e) {
        try {
          Files.deleteIfExists(tmp);
        } catch (IOException ignored) {
          // nothing left to do: the capture finds the file missing
        }
      }
    }
  }

  /** One summary directory's groups in one task attempt (see summary()). */
  private static final class SumBuf extends Sink {
    long[][] cols; // keys, lo, hi, n, flags
    int c;

    SumBuf(String dir, TaskContext ctx) {
      super(dir, ctx, "sum");
      this.cols = new long[5][Math.min(256, chunk)];
    }

    void add(long key, long lo, long hi, long n, long flags) {
      int room = room(c, cols[0].length);
      if (room != cols[0].length) {
        for (int i = 0; i < cols.length; i++) {
          cols[i] = Arrays.copyOf(cols[i], room);
        }
      }
      cols[0][c] = key;
      cols[1][c] = lo;
      cols[2][c] = hi;
      cols[3][c] = n;
      cols[4][c] = flags;
      c++;
    }

    /**
     * Appends the chunk (see the file comment): int64 c, five int64 widths, then each column's
     * c values in its width: 0 when every value is 0 (where the tap runs, lo, hi and the flags
     * of non-null keys always are), 4 when every one fits an int, else 8. At 10^7 groups a
     * slot's file is 80 MB instead of 400 MB.
     */
    @Override
    void spill() {
      int[] widths = new int[cols.length];
      int body = 0;
      for (int i = 0; i < cols.length; i++) {
        boolean zero = true;
        boolean narrow = true;
        for (int j = 0; j < c; j++) {
          long v = cols[i][j];
          zero &= v == 0;
          narrow &= v == (int) v;
        }
        widths[i] = zero ? 0 : narrow ? 4 : 8;
        body += widths[i] * c;
      }
      int padded = (body + 7) & ~7;
      ByteBuffer bb = buffer(8 * (1 + cols.length) + padded);
      bb.position(0);
      bb.putLong(c);
      for (int w : widths) {
        bb.putLong(w);
      }
      for (int i = 0; i < cols.length; i++) {
        for (int j = 0; widths[i] > 0 && j < c; j++) {
          putValue(bb, cols[i][j], widths[i]);
        }
      }
      while (bb.position() < 8 * (1 + cols.length) + padded) {
        bb.put((byte) 0);
      }
      write(bb);
      c = 0;
    }

    @Override
    void flush() {
      if (c > 0) {
        spill();
      }
    }
  }

  /** One tap directory's (key, id) pairs and runs in one task attempt (see record()). */
  private static final class Buf extends Sink {
    long[] keys;
    long[] ids;
    int n;
    // runs of rows with one key and consecutive ids (key, first id, length >= 2) or one id
    // (key, id, -length): rows sorted by id within their groups (the common, clustered case),
    // and a joined row repeated for each of its matches, cost 24 bytes per group, not 16 per
    // row
    long[] runKeys;
    long[] runFirst;
    long[] runLen;
    int m;
    long curKey;
    long curFirst;
    long curLen;
    long curStep; // 1: consecutive ids, 0: one id (fixed by the run's second row)

    Buf(String dir, TaskContext c) {
      super(dir, c, "tap");
      this.keys = new long[Math.min(CHUNK, chunk)];
      this.ids = new long[keys.length];
      this.runKeys = new long[Math.min(1024, chunk)];
      this.runFirst = new long[runKeys.length];
      this.runLen = new long[runKeys.length];
    }

    /** Records one row: extends the open run, or closes it and opens another. A row with a
     * null key (id stored as ~id) is never part of a run. */
    void add(long key, long id) {
      if (curLen > 0 && id >= 0 && key == curKey) {
        if (curLen == 1 && (id == curFirst + 1 || id == curFirst)) {
          curStep = id - curFirst;
          curLen = 2;
          return;
        }
        if (curLen > 1 && id == curFirst + curStep * curLen) {
          curLen++;
          return;
        }
      }
      close();
      if (id < 0) {
        pair(key, id);
      } else {
        curKey = key;
        curFirst = id;
        curLen = 1;
      }
    }

    /** Moves the open run to the pairs (one row) or the runs. */
    void close() {
      if (curLen == 1) {
        pair(curKey, curFirst);
      } else if (curLen > 1) {
        int room = room(m, runKeys.length);
        if (room != runKeys.length) {
          runKeys = Arrays.copyOf(runKeys, room);
          runFirst = Arrays.copyOf(runFirst, room);
          runLen = Arrays.copyOf(runLen, room);
        }
        runKeys[m] = curKey;
        runFirst[m] = curFirst;
        runLen[m] = curStep == 1 ? curLen : -curLen;
        m++;
      }
      curLen = 0;
    }

    void pair(long key, long id) {
      int room = room(n, keys.length);
      if (room != keys.length) {
        keys = Arrays.copyOf(keys, room);
        ids = Arrays.copyOf(ids, room);
      }
      keys[n] = key;
      ids[n] = id;
      n++;
    }

    /** Scratch for spill(): the rows of each key segment. */
    private int[] segRows = new int[0];

    /**
     * Appends the chunk (see the file comment): the single rows' key segments (consecutive
     * rows of one key and one null-ness) stored as segments when there are at most half as
     * many as rows (rows sorted by key: a sort-merge join's reduce side), else one key per
     * row; keys and ids in 4 bytes when every one of the chunk fits an int, else 8; then the
     * runs. At 10^8 rows of ten per key with ids below 2^31, 4.4 bytes a row instead of 16:
     * the file is written on the executor and read back on the driver, and on a machine short
     * of page cache both are disk traffic.
     */
    @Override
    void spill() {
      if (segRows.length < n) {
        segRows = new int[Math.max(n, Math.min(CHUNK, chunk))];
      }
      int g = 0;
      boolean wideKeys = false;
      boolean wideIds = false;
      for (int i = 0; i < n; i++) {
        long k = keys[i];
        long id = ids[i];
        wideKeys |= k != (int) k;
        wideIds |= id != (int) id;
        if (g > 0 && k == keys[i - 1] && (id < 0) == (ids[i - 1] < 0)) {
          segRows[g - 1]++;
        } else {
          segRows[g++] = 1;
        }
      }
      boolean segmented = 2 * g <= n;
      int kw = wideKeys ? 8 : 4;
      int iw = wideIds ? 8 : 4;
      int body = segmented ? g * kw + 4 * g + n * iw : n * kw + n * iw;
      int padded = (body + 7) & ~7;
      ByteBuffer bb = buffer(8 * 4 + padded + 8 * (1 + 3 * m));
      bb.position(0);
      bb.putLong(n);
      bb.putLong(segmented ? g : n);
      bb.putLong(kw);
      bb.putLong(iw);
      if (segmented) {
        for (int j = 0, i = 0; j < g; i += segRows[j], j++) {
          putValue(bb, keys[i], kw);
        }
        for (int j = 0; j < g; j++) {
          bb.putInt(segRows[j]);
        }
      } else {
        for (int i = 0; i < n; i++) {
          putValue(bb, keys[i], kw);
        }
      }
      for (int i = 0; i < n; i++) {
        putValue(bb, ids[i], iw);
      }
      while (bb.position() < 8 * 4 + padded) {
        bb.put((byte) 0);
      }
      bb.putLong(m);
      int at = 8 * 5 + padded;
      bb.asLongBuffer().put(runKeys, 0, m);
      bb.position(at + 8 * m);
      bb.asLongBuffer().put(runFirst, 0, m);
      bb.position(at + 16 * m);
      bb.asLongBuffer().put(runLen, 0, m);
      write(bb);
      n = 0;
      m = 0;
    }

    @Override
    void flush() {
      close();
      if (n > 0 || m > 0) {
        spill();
      }
    }
  }

  private static final class Task {
    final long attempt;
    final HashMap<String, Sink> bufs = new HashMap<>();
    Sink[] byToken = new Sink[4];
    boolean[] resolved = new boolean[4];

    Task(long attempt) {
      this.attempt = attempt;
    }
  }

  /** Records (key, id) for the running task under token's directory; returns id. */
  public static long record(int token, long key, boolean keyIsNull, long id) {
    Buf b = (Buf) sink(token, "tap");
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

  /** Records a group's range summary under token's directory; returns lo. */
  public static long summary(
      int token, long key, boolean keyIsNull, long lo, long hi, boolean ok, long n) {
    SumBuf b = (SumBuf) sink(token, "sum");
    if (b != null) {
      b.add(keyIsNull ? 0L : key, lo, hi, n, (keyIsNull ? 1L : 0L) | (ok ? 2L : 0L));
    }
    return lo;
  }

  /** The running task attempt's sink for token (of kind "tap" or "sum"), or null: no task,
   * no directory for the token in this job, or a partition an earlier stage recorded. */
  private static Sink sink(int token, String kind) {
    if (token < 0) {
      return null;
    }
    TaskContext ctx = TaskContext.get();
    if (ctx == null) { // evaluated outside a task (never in a capture's pass): nothing to keep
      return null;
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
      t.byToken[i] =
          dir == null || recordedBefore(dir, ctx, kind)
              ? null
              : t.bufs.computeIfAbsent(
                  dir, d -> kind.equals("sum") ? new SumBuf(d, ctx) : new Buf(d, ctx));
      t.resolved[i] = true;
    }
    return t.byToken[i];
  }

  /**
   * Whether an earlier stage already published this partition's file in dir: Spark runs a map
   * side twice when an orderBy samples it in a job of its own, and the second run would only
   * write the same pairs again (the capture matches one stage's files; the first one is
   * complete when its job ran every partition, and if not, no stage matches and the capture
   * joins instead, so skipping never costs exactness).
   */
  private static boolean recordedBefore(String dir, TaskContext ctx, String kind) {
    String own = kind + "-" + ctx.stageId() + "-" + ctx.partitionId() + ".bin";
    try (java.nio.file.DirectoryStream<Path> files =
        Files.newDirectoryStream(Paths.get(dir), kind + "-*-" + ctx.partitionId() + ".bin")) {
      for (Path f : files) {
        if (!f.getFileName().toString().equals(own)) {
          return true;
        }
      }
    } catch (IOException e) {
      return false;
    }
    return false;
  }

  private static Task start(TaskContext ctx, long attempt) {
    final Task t = new Task(attempt);
    ctx.addTaskCompletionListener(
        c -> {
          TASKS.remove(attempt);
          if (TASK.get() == t) {
            TASK.remove();
          }
          boolean ok = !c.isFailed();
          for (Sink b : t.bufs.values()) {
            b.finish(ok);
          }
        });
    return t;
  }
}
