package org.lumen;

import java.util.Objects;

/**
 * How a snapshot is written (lumen_snapshot_options), for {@link Session#snapshot} and
 * {@link Session#save}: a plain Java object, nothing to free; setters return this.
 */
public final class SnapshotOptions {
  private Dtype stateDtype;

  /** The defaults (lumen_snapshot_options_init: fp32 state). */
  public SnapshotOptions() {
    try (org.lumen.capi.SnapshotOptions defaults = new org.lumen.capi.SnapshotOptions()) {
      stateDtype = Dtype.of(defaults.getStateDtype());
    }
  }

  /** A native copy, which the caller closes. */
  org.lumen.capi.SnapshotOptions toNative() {
    org.lumen.capi.SnapshotOptions options = new org.lumen.capi.SnapshotOptions();
    options.setStateDtype(stateDtype.value());
    return options;
  }

  /** The dtype of the stored state. */
  public Dtype stateDtype() { return stateDtype; }
  /**
   * Sets the dtype of the stored state: FLOAT32 (default, exact) or BFLOAT16 (half the size,
   * rounded to nearest even).
   */
  public SnapshotOptions stateDtype(Dtype stateDtype) {
    this.stateDtype = Objects.requireNonNull(stateDtype, "stateDtype");
    return this;
  }

  @Override
  public String toString() {
    return "SnapshotOptions[stateDtype=" + stateDtype + "]";
  }
}
