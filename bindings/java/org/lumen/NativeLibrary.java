package org.lumen;

import java.io.File;
import java.lang.ref.Cleaner;
import java.net.URISyntaxException;

/**
 * Loads lumen's JNI library, which links liblumen itself. It looks next to the jar (or class
 * directory) this class came from first, which is where both the build tree and
 * {@code cmake --install} put it, and then on {@code java.library.path}.
 */
public final class NativeLibrary {
  /** Frees the native objects of handles and options that were not closed. */
  public static final Cleaner CLEANER = Cleaner.create();

  private NativeLibrary() {}

  /** Loads {@code lib<name>.so}; thread-safe and idempotent (the JVM loads a library once). */
  public static synchronized void load(String name) {
    File beside = besideCode(System.mapLibraryName(name));
    if (beside != null && beside.isFile()) {
      System.load(beside.getAbsolutePath());
    } else {
      System.loadLibrary(name);
    }
  }

  private static File besideCode(String fileName) {
    try {
      File code = new File(
          NativeLibrary.class.getProtectionDomain().getCodeSource().getLocation().toURI());
      File directory = code.isDirectory() ? code : code.getParentFile();
      return directory == null ? null : new File(directory, fileName);
    } catch (URISyntaxException | SecurityException | NullPointerException e) {
      return null;
    }
  }
}
