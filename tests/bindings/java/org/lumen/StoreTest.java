package org.lumen;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/** Session stores through the Java binding: a file store, versions and compare-and-set. */
class StoreTest {
  @Test
  void storesSaveAndLoadByKeyWithVersions() throws Exception {
    LumenTest fixture = new LumenTest();  // its model and engine, not its tests
    fixture.buildModel();
    Path dir = Files.createTempDirectory("lumen-java-store");
    try (Store store = Store.open("file://" + dir);
         Session a = fixture.engine.newSession();
         Session b = fixture.engine.newSession()) {
      float[][] in = fixture.inputs(1);
      a.step(0, in[0], in[1], in[2], in[3], in[4]);
      assertEquals(1, store.save("chat", a));
      assertEquals(2, store.save("chat", a, 1, 0));
      assertEquals(2, store.load("chat", b));
      assertArrayEquals(a.readState(0, StatePart.MATRIX), b.readState(0, StatePart.MATRIX));
      LumenException conflict =
          assertThrows(LumenException.class, () -> store.save("chat", b, 1, 0));
      assertEquals(Status.VERSION_CONFLICT, conflict.status());
      LumenException missing = assertThrows(LumenException.class, () -> store.load("none", b));
      assertEquals(Status.NOT_FOUND, missing.status());
      store.remove("chat");
    } finally {
      fixture.close();
      try (Stream<Path> paths = Files.walk(dir)) {
        paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
      }
    }
  }
}
