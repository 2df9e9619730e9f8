package org.lumen;

import org.lumen.capi.Capi;

/**
 * A session store ({@code lumen_store}): sessions' snapshots under string keys, in a directory
 * ({@code file:///path}) or a Redis server ({@code redis://host:port/db}), each with a version
 * and an optional expiry; see "Session stores" in lumen.h. Thread-safe: its calls take turns.
 * Close it to drop its connection. Since 0.3.
 */
public final class Store extends Handle {
  private Store(long address) {
    super(address, Capi::lumen_store_destroy);
  }

  /** Opens the store at {@code uri} with the default options (5 s timeout, 4 MiB parts). */
  public static Store open(String uri) {
    return open(uri, 0, 0);
  }

  /**
   * Opens the store at {@code uri}; {@code timeoutMs} (redis://, 0: 5000) limits connecting
   * and each answer, {@code partBytes} (redis://, 0: 4 MiB) the parts a value is split into.
   */
  public static Store open(String uri, int timeoutMs, long partBytes) {
    long[] out = new long[1];
    try (org.lumen.capi.StoreOptions options = new org.lumen.capi.StoreOptions()) {
      options.setTimeoutMs(timeoutMs);
      options.setPartBytes(partBytes);
      Capi.lumen_store_open(uri, options, out);
    }
    return new Store(out[0]);
  }

  /** Saves the session under {@code key}, whatever is stored, and returns its new version. */
  public long save(String key, Session session) {
    return save(key, session, -1, 0);
  }

  /**
   * Saves the session under {@code key} and returns the version it now has.
   * {@code expectedVersion}: -1 replaces whatever is stored, 0 saves only a new key, n only
   * over version n (else {@link Status#VERSION_CONFLICT}); {@code expiryMs}: 0 never expires.
   */
  public long save(String key, Session session, long expectedVersion, long expiryMs) {
    long[] version = new long[1];
    try (org.lumen.capi.StoreSaveOptions options = new org.lumen.capi.StoreSaveOptions()) {
      options.setExpectedVersion(expectedVersion);
      options.setExpiryMs(expiryMs);
      useAddress(store -> session.useAddress(
          s -> Capi.lumen_store_save(store, key, s, options, version)));
    }
    return version[0];
  }

  /**
   * Restores the session from the value under {@code key} and returns its version
   * ({@link Status#NOT_FOUND} when the key holds nothing).
   */
  public long load(String key, Session session) {
    long[] version = new long[1];
    useAddress(store -> session.useAddress(s -> Capi.lumen_store_load(store, key, s, version)));
    return version[0];
  }

  /** Removes the value under {@code key} ({@link Status#NOT_FOUND} when there is none). */
  public void remove(String key) {
    useAddress(store -> Capi.lumen_store_remove(store, key));
  }
}
