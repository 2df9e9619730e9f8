package org.lumen;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/** The engine memory budget through the Java binding: its options, eviction, prefetch, reload and
 * stats. */
class MemoryBudgetTest {
  static long residentBytes() throws Exception {
    return Long.parseLong(Files.readString(Path.of("/proc/self/statm")).split(" ")[1]) * 4096;
  }

  @Test
  void theSpillDirectorysNativeCopiesAreFreed() throws Exception {
    // Each native copy of the options copies the 256 KiB directory: SWIG's default setter
    // for a const char* member never freed those copies, so 512 of them would keep 128 MiB.
    String text = "d".repeat(1 << 18);
    EngineOptions options = new EngineOptions().spillDirectory(text);
    try (org.lumen.capi.EngineOptions copy = options.toNative()) {
      assertEquals(text, copy.getSpillDirectory());
    }
    // Nothing read back in the loop: a 256 KiB Java string each time would grow the heap.
    Runnable cycle = () -> {
      for (int i = 0; i < 512; ++i) options.toNative().close();
    };
    cycle.run();
    long before = residentBytes();
    cycle.run();
    long grown = residentBytes() - before;
    assertTrue(grown < 32L << 20, "resident memory grew by " + grown + " bytes");
  }

  @Test
  void sessionsBeyondTheBudgetSpillAndComeBackBitForBit() throws Exception {
    LumenTest fixture = new LumenTest();  // its model and inputs, not its tests
    fixture.buildModel();
    Path dir = Files.createTempDirectory("lumen-java-spill");
    long budget = 2 * fixture.model.stateBytes();
    EngineOptions options =
        new EngineOptions().numThreads(1).memoryBudgetBytes(budget).spillDirectory(dir.toString());
    try (Engine engine = new Engine(fixture.model, options);
         Session a = engine.newSession()) {
      assertEquals(0, fixture.engine.stats().evictions());  // no budget: every field 0
      assertEquals(0, fixture.engine.stats().memoryBudgetBytes());
      float[][] in = fixture.inputs(1);
      a.step(0, in[0], in[1], in[2], in[3], in[4]);
      float[] before = a.readState(0, StatePart.MATRIX);
      try (Session b = engine.newSession(); Session c = engine.newSession()) {
        // c needed room: a, the least recently used, went to the spill directory.
        assertFalse(a.isResident());
        assertTrue(b.isResident() && c.isResident());
        MemoryStats stats = engine.stats();
        assertEquals(budget, stats.memoryBudgetBytes());
        assertEquals(2, stats.residentSessions());
        assertEquals(1, stats.spilledSessions());
        assertEquals(1, stats.evictions());
        assertTrue(stats.bytesEvicted() > 0);

        a.prefetch();
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (!a.isResident() && System.nanoTime() < deadline) Thread.sleep(1);
        assertTrue(a.isResident(), "the prefetch did not bring the session back");
        assertEquals(1, engine.stats().prefetches());
        assertArrayEquals(before, a.readState(0, StatePart.MATRIX));

        // The prefetch evicted b (then the least recently used); a call on it reloads it.
        assertFalse(b.isResident());
        b.step(0, in[0], in[1], in[2], in[3], in[4]);
        assertTrue(b.isResident());
        assertEquals(1, engine.stats().reloads());
      }
    } finally {
      fixture.close();
      try (Stream<Path> paths = Files.walk(dir)) {
        paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
      }
    }
  }
}
