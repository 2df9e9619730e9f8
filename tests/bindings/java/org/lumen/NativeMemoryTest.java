package org.lumen;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * What the collector cannot see is counted: the state bytes of open sessions, and the handles
 * that the Cleaner rather than close() freed, reported with where they were made when
 * lumen.reportLeaks is set. Runs in a JVM of its own: the counts are the process's.
 */
class NativeMemoryTest {
  static final long TIMEOUT_NANOS = 20_000_000_000L;
  Model model;
  Engine engine;

  @BeforeEach
  void open() {
    try (ModelBuilder builder = new ModelBuilder()) {
      builder.addLayer(new LayerOptions(Family.GATED_DELTA_NET).numHeads(4).keyDim(128)
                       .valueDim(128));
      model = builder.build();
    }
    engine = new Engine(model, new EngineOptions().numThreads(1));
  }

  @AfterEach
  void close() {
    engine.close();
    model.close();
    System.clearProperty(NativeMemory.REPORT_LEAKS_PROPERTY);
  }

  @Test
  void openSessionsAndTheirStateAreCounted() {
    long bytes = NativeMemory.sessionStateBytes(), sessions = NativeMemory.openSessions();
    long leaks = NativeMemory.freedByCollector();
    try (Session a = engine.newSession()) {
      Session b = a.fork();
      assertEquals(model.stateBytes(), a.stateBytes());
      assertTrue(a.stateBytes() >= 4 * 128 * 128 * 4);
      assertEquals(bytes + 2 * a.stateBytes(), NativeMemory.sessionStateBytes());
      assertEquals(sessions + 2, NativeMemory.openSessions());
      b.close();
      assertEquals(bytes + a.stateBytes(), NativeMemory.sessionStateBytes());
    }
    assertEquals(bytes, NativeMemory.sessionStateBytes());
    assertEquals(sessions, NativeMemory.openSessions());
    assertEquals(leaks, NativeMemory.freedByCollector());
  }

  /** A session nothing refers to once this returns, made with reports on. */
  void dropASession() {
    System.setProperty(NativeMemory.REPORT_LEAKS_PROPERTY, "true");
    engine.newSession().reset();
    try (Session closed = engine.newSession()) {
      closed.reset(); // closed: never reported
    }
  }

  @Test
  void aSessionTheCollectorFreesIsReportedWithWhereItWasMade() throws Exception {
    List<LogRecord> records = new CopyOnWriteArrayList<>();
    Handler handler = new Handler() {
      @Override public void publish(LogRecord record) { records.add(record); }
      @Override public void flush() {}
      @Override public void close() {}
    };
    Logger logger = Logger.getLogger("org.lumen");
    logger.addHandler(handler);
    try {
      long bytes = NativeMemory.sessionStateBytes(), leaks = NativeMemory.freedByCollector();
      dropASession();
      assertEquals(bytes + model.stateBytes(), NativeMemory.sessionStateBytes());
      long deadline = System.nanoTime() + TIMEOUT_NANOS;
      while (NativeMemory.freedByCollector() == leaks && System.nanoTime() < deadline) {
        System.gc();
        Thread.sleep(10);
      }
      assertEquals(leaks + 1, NativeMemory.freedByCollector());
      assertEquals(bytes, NativeMemory.sessionStateBytes());
      assertEquals(1, records.size());
      LogRecord record = records.get(0);
      assertTrue(record.getMessage().startsWith("org.lumen.Session was not closed"),
                 record.getMessage());
      assertTrue(record.getMessage().contains(model.stateBytes() + " bytes"),
                 record.getMessage());
      assertNotNull(record.getThrown());
      StringWriter trace = new StringWriter();
      record.getThrown().printStackTrace(new PrintWriter(trace));
      assertTrue(trace.toString().contains("NativeMemoryTest.dropASession"), trace.toString());
    } finally {
      logger.removeHandler(handler);
    }
  }
}
