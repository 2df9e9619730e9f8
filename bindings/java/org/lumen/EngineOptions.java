package org.lumen;

import java.util.Objects;

/**
 * How an engine runs (lumen_engine_options), for {@link Engine#Engine(Model, EngineOptions)}:
 * a plain Java object, nothing to free. Every option starts at lumen's default (AUTO
 * backend, one thread per hardware thread, device 0); setters return this.
 */
public final class EngineOptions {
  private Backend backend;
  private int numThreads;
  private int device;
  private long memoryBudgetBytes;
  private String spillDirectory;

  /** The defaults (lumen_engine_options_init). */
  public EngineOptions() {
    try (org.lumen.capi.EngineOptions defaults = new org.lumen.capi.EngineOptions()) {
      backend = Backend.of(defaults.getBackend());
      numThreads = defaults.getNumThreads();
      device = defaults.getDevice();
      memoryBudgetBytes = defaults.getMemoryBudgetBytes();
      spillDirectory = defaults.getSpillDirectory();
    }
  }

  /** A native copy, which the caller closes. */
  org.lumen.capi.EngineOptions toNative() {
    org.lumen.capi.EngineOptions options = new org.lumen.capi.EngineOptions();
    options.setBackend(backend.value());
    options.setNumThreads(numThreads);
    options.setDevice(device);
    options.setMemoryBudgetBytes(memoryBudgetBytes);
    options.setSpillDirectory(spillDirectory);
    return options;
  }

  /** The backend asked for. */
  public Backend backend() { return backend; }
  /** Sets the backend (default AUTO: CUDA, then ROCm, then the CPU). */
  public EngineOptions backend(Backend backend) {
    this.backend = Objects.requireNonNull(backend, "backend");
    return this;
  }

  /** CPU worker threads including the caller (0: one per hardware thread). */
  public int numThreads() { return numThreads; }
  /** Sets the CPU worker threads including the caller, at most 1024 (0: one per core). */
  public EngineOptions numThreads(int numThreads) {
    this.numThreads = numThreads;
    return this;
  }

  /** The GPU ordinal of GPU backends. */
  public int device() { return device; }
  /** Sets the GPU ordinal of GPU backends (default 0). */
  public EngineOptions device(int device) {
    this.device = device;
    return this;
  }

  /** Bytes of session state kept resident; 0 (the default) is no limit. Since 0.3. */
  public long memoryBudgetBytes() { return memoryBudgetBytes; }
  public EngineOptions memoryBudgetBytes(long memoryBudgetBytes) {
    this.memoryBudgetBytes = memoryBudgetBytes;
    return this;
  }

  /** Where evicted sessions go; null (the default) is a private directory. Since 0.3. */
  public String spillDirectory() { return spillDirectory; }
  public EngineOptions spillDirectory(String spillDirectory) {
    this.spillDirectory = spillDirectory;
    return this;
  }

  @Override
  public String toString() {
    return "EngineOptions[backend=" + backend + ", numThreads=" + numThreads + ", device="
        + device + ", memoryBudgetBytes=" + memoryBudgetBytes + ", spillDirectory="
        + spillDirectory + "]";
  }
}
