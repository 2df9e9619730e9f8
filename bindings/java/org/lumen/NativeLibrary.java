package org.lumen;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.lang.ref.Cleaner;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Loads lumen's JNI library, which links liblumen itself. It looks, in order:
 * <ol>
 *   <li>next to the jar (or class directory) this class came from, which is where both the
 *       build tree and {@code cmake --install} put it;
 *   <li>in the jar itself, under {@code org/lumen/native/<os>-<arch>/} (the package jar,
 *       lumen-VERSION.jar): the libraries listed in its {@code libraries} file are extracted
 *       into one new private temporary directory (so that the JNI library's {@code $ORIGIN}
 *       rpath finds liblumen beside it), loaded, and deleted again;
 *   <li>on {@code java.library.path}.
 * </ol>
 */
public final class NativeLibrary {
  /** Frees the native objects of handles and options that were not closed. */
  public static final Cleaner CLEANER = Cleaner.create();

  private NativeLibrary() {}

  /** Loads {@code lib<name>.so}; thread-safe and idempotent (the JVM loads a library once). */
  public static synchronized void load(String name) {
    String fileName = System.mapLibraryName(name);
    File beside = besideCode(fileName);
    if (beside != null && beside.isFile()) {
      System.load(beside.getAbsolutePath());
    } else if (NativeLibrary.class.getResource(resourceDirectory() + "libraries") != null) {
      loadFromClassPath(fileName);
    } else {
      System.loadLibrary(name);
    }
  }

  /** Where the package jar keeps the libraries of this platform, e.g. linux-x86_64. */
  static String resourceDirectory() {
    return "/org/lumen/native/" + platform() + "/";
  }

  static String platform() {
    String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT);
    String arch = System.getProperty("os.arch", "").toLowerCase(Locale.ROOT);
    if (os.startsWith("linux")) os = "linux";
    if (arch.equals("amd64")) arch = "x86_64";
    if (arch.equals("arm64")) arch = "aarch64";
    return os.replace(' ', '_') + "-" + arch;
  }

  private static File besideCode(String fileName) {
    try {
      File code = new File(
          NativeLibrary.class.getProtectionDomain().getCodeSource().getLocation().toURI());
      File directory = code.isDirectory() ? code : code.getParentFile();
      return directory == null ? null : new File(directory, fileName);
    } catch (URISyntaxException | SecurityException | NullPointerException
             | IllegalArgumentException e) {
      return null;
    }
  }

  /**
   * Extracts every library of the platform's resource directory into a new private temporary
   * directory, loads {@code fileName} from there, and deletes the copies: once loaded, a
   * library no longer needs its file (where the system cannot delete a loaded file, they go
   * when the JVM exits).
   */
  private static void loadFromClassPath(String fileName) {
    String directory = resourceDirectory();
    List<Path> extracted = new ArrayList<>();
    Path temporary = null;
    try {
      temporary = Files.createTempDirectory("lumen-native-"); // rwx for the owner only
      for (String library : resource(directory + "libraries").split("\n")) {
        library = library.trim();
        if (library.isEmpty()) continue;
        Path file = temporary.resolve(library);
        try (InputStream in = NativeLibrary.class.getResourceAsStream(directory + library)) {
          if (in == null) throw new IOException(directory + library + " is missing");
          Files.copy(in, file);
        }
        extracted.add(file);
      }
      Path library = temporary.resolve(fileName);
      if (!extracted.contains(library)) {
        throw new UnsatisfiedLinkError(directory + " holds no " + fileName);
      }
      System.load(library.toString());
    } catch (IOException e) {
      throw new UncheckedIOException("cannot extract lumen's native libraries", e);
    } finally {
      if (temporary != null) delete(temporary, extracted);
    }
  }

  /** Deletes the files and their directory now, or else when the JVM exits. */
  private static void delete(Path directory, List<Path> files) {
    directory.toFile().deleteOnExit(); // registered first, so deleted last
    for (Path file : files) {
      try {
        Files.deleteIfExists(file);
      } catch (IOException e) {
        file.toFile().deleteOnExit();
      }
    }
    try {
      Files.deleteIfExists(directory);
    } catch (IOException e) {
      // deleted at exit
    }
  }

  private static String resource(String name) throws IOException {
    try (InputStream in = NativeLibrary.class.getResourceAsStream(name)) {
      if (in == null) throw new IOException(name + " is missing");
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    }
  }
}
