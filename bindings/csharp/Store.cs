using System;
using Lumen.CApi;

namespace Lumen {

/// <summary>A session store (lumen_store): sessions' snapshots under string keys, in a
/// directory ("file:///path") or a Redis server ("redis://host:port/db"), each with a version
/// and an optional expiry; see "Session stores" in lumen.h. Thread-safe: its calls take turns.
/// Since 0.3.</summary>
public sealed class Store : NativeObject {
  Store(IntPtr address) : base(address, Capi.lumen_store_destroy, 0) {}

  /// <summary>Opens the store at <paramref name="uri"/>. timeoutMs (redis://, 0: 5000) limits
  /// connecting and each answer; partBytes (redis://, 0: 4 MiB) the parts a value is split
  /// into.</summary>
  public static Store Open(string uri, int timeoutMs = 0, long partBytes = 0) {
    using (var options = new StoreOptions { TimeoutMs = timeoutMs, PartBytes = partBytes }) {
      Capi.lumen_store_open(uri, options, out IntPtr address);
      return new Store(address);
    }
  }

  /// <summary>Saves the session under <paramref name="key"/> and returns the version it now
  /// has. expectedVersion: -1 replaces whatever is stored, 0 saves only a new key, n only over
  /// version n (else LumenStatus.VERSION_CONFLICT); expiryMs: 0 never expires.</summary>
  public long Save(string key, Session session, long expectedVersion = -1, long expiryMs = 0) {
    using (var options = new StoreSaveOptions { ExpectedVersion = expectedVersion,
                                                ExpiryMs = expiryMs })
    using (HandleLease store = Lease())
    using (HandleLease s = session.Lease()) {
      Capi.lumen_store_save(store.Address, key, s.Address, options, out long version);
      return version;
    }
  }

  /// <summary>Restores the session from the value under <paramref name="key"/> and returns its
  /// version (LumenStatus.NOT_FOUND when the key holds nothing).</summary>
  public long Load(string key, Session session) {
    using (HandleLease store = Lease())
    using (HandleLease s = session.Lease()) {
      Capi.lumen_store_load(store.Address, key, s.Address, out long version);
      return version;
    }
  }

  /// <summary>Removes the value under <paramref name="key"/> (LumenStatus.NOT_FOUND when there
  /// is none).</summary>
  public void Remove(string key) {
    using (HandleLease store = Lease()) Capi.lumen_store_remove(store.Address, key);
  }
}

}
