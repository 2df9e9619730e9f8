package org.lumen;

/**
 * Where an engine's session state is and how much has moved (lumen_memory_stats), from
 * {@link Engine#stats()}: a plain Java value, nothing to free. Sizes count state bytes as the
 * memory budget does; an engine without a budget counts nothing (every field 0). Since 0.3.
 */
public final class MemoryStats {
  private final long memoryBudgetBytes;
  private final long residentSessions;
  private final long residentBytes;
  private final long hostSessions;
  private final long hostBytes;
  private final long spilledSessions;
  private final long spilledBytes;
  private final long evictions;
  private final long reloads;
  private final long prefetches;
  private final long bytesEvicted;
  private final long bytesReloaded;

  MemoryStats(org.lumen.capi.MemoryStats stats) {
    memoryBudgetBytes = stats.getMemoryBudgetBytes();
    residentSessions = stats.getResidentSessions();
    residentBytes = stats.getResidentBytes();
    hostSessions = stats.getHostSessions();
    hostBytes = stats.getHostBytes();
    spilledSessions = stats.getSpilledSessions();
    spilledBytes = stats.getSpilledBytes();
    evictions = stats.getEvictions();
    reloads = stats.getReloads();
    prefetches = stats.getPrefetches();
    bytesEvicted = stats.getBytesEvicted();
    bytesReloaded = stats.getBytesReloaded();
  }

  /** The budget; 0: none. */
  public long memoryBudgetBytes() { return memoryBudgetBytes; }
  /** Sessions in the engine's memory (the device's for a GPU engine). */
  public long residentSessions() { return residentSessions; }
  public long residentBytes() { return residentBytes; }
  /** Sessions in the pinned host tier of a GPU engine; 0 on the CPU. */
  public long hostSessions() { return hostSessions; }
  public long hostBytes() { return hostBytes; }
  /** Sessions in the spill directory. */
  public long spilledSessions() { return spilledSessions; }
  /** Their files' bytes. */
  public long spilledBytes() { return spilledBytes; }
  /** Sessions evicted so far. */
  public long evictions() { return evictions; }
  /** Sessions brought back by a call on them. */
  public long reloads() { return reloads; }
  /** Sessions brought back by {@link Session#prefetch()}. */
  public long prefetches() { return prefetches; }
  /** Bytes written to the spill directory so far. */
  public long bytesEvicted() { return bytesEvicted; }
  /** Bytes read back from it so far. */
  public long bytesReloaded() { return bytesReloaded; }

  @Override
  public String toString() {
    return "MemoryStats[memoryBudgetBytes=" + memoryBudgetBytes + ", residentSessions="
        + residentSessions + ", residentBytes=" + residentBytes + ", hostSessions="
        + hostSessions + ", hostBytes=" + hostBytes + ", spilledSessions=" + spilledSessions
        + ", spilledBytes=" + spilledBytes + ", evictions=" + evictions + ", reloads=" + reloads
        + ", prefetches=" + prefetches + ", bytesEvicted=" + bytesEvicted + ", bytesReloaded="
        + bytesReloaded + "]";
  }
}
