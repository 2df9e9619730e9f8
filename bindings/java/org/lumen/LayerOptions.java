package org.lumen;

import java.util.Objects;
import java.util.function.Consumer;
import org.lumen.capi.Capi;

/**
 * The description of one layer (lumen_layer_options), for {@link ModelBuilder#addLayer}: a
 * plain Java object, nothing to free. Start from a family ({@code new
 * LayerOptions(Family.GATED_DELTA_NET)}, every other option at lumen's default) or from a
 * published model's layer ({@link #qwen3NextGatedDeltaNet()}, {@link #kimiLinearKda()},
 * {@link #mamba2()}), then set what you need; setters return this. The library validates the
 * options when the layer is added. lumen.h documents each field.
 */
public final class LayerOptions {
  private Family family;
  private int numHeads;
  private int numValueHeads;
  private int keyDim;
  private int valueDim;
  private float scale;
  private FeatureMap featureMap;
  private boolean normalize;
  private float normalizeEps;
  private boolean qkL2norm;
  private boolean betaSigmoid;
  private boolean gateRaw;
  private boolean allowNegEigval;
  private float gateLowerBound;
  private Dtype stateDtype;
  private int convSize;
  private ConvActivation convActivation;

  /** A layer of {@code family}, every other option at its default (lumen_layer_options_init). */
  public LayerOptions(Family family) {
    try (org.lumen.capi.LayerOptions defaults = new org.lumen.capi.LayerOptions()) {
      copyFrom(defaults); // the proxy's constructor runs lumen_layer_options_init
    }
    family(family);
  }

  private LayerOptions() {}

  /** Options filled by one of lumen.h's init functions. */
  private static LayerOptions filledBy(Consumer<org.lumen.capi.LayerOptions> init) {
    try (org.lumen.capi.LayerOptions options = new org.lumen.capi.LayerOptions()) {
      init.accept(options);
      return of(options);
    }
  }

  /**
   * Qwen3-Next-80B-A3B's Gated DeltaNet layer
   * (lumen_layer_options_init_qwen3_next_gated_delta_net): H = 16, HV = 32, K = V = 128, a
   * convolution of width 4, qk_l2norm, beta_sigmoid, gate_raw.
   */
  public static LayerOptions qwen3NextGatedDeltaNet() {
    return filledBy(Capi::lumen_layer_options_init_qwen3_next_gated_delta_net);
  }

  /**
   * Kimi-Linear-48B-A3B's KDA layer (lumen_layer_options_init_kimi_linear_kda): H = HV = 32,
   * K = V = 128, a convolution of width 4, qk_l2norm, beta_sigmoid, gate_raw.
   */
  public static LayerOptions kimiLinearKda() {
    return filledBy(Capi::lumen_layer_options_init_kimi_linear_kda);
  }

  /**
   * Mamba-2 2.7B's layer on ssd (lumen_layer_options_init_mamba2): HV = 80 heads of V = 64,
   * H = 1, K = 128, a convolution of width 4 with biases, gate_raw, scale 1.
   */
  public static LayerOptions mamba2() {
    return filledBy(Capi::lumen_layer_options_init_mamba2);
  }

  /** The options of a native struct (Model.layerOptions). */
  static LayerOptions of(org.lumen.capi.LayerOptions options) {
    return new LayerOptions().copyFrom(options);
  }

  private LayerOptions copyFrom(org.lumen.capi.LayerOptions options) {
    family = options.getFamily() == 0 ? null : Family.of(options.getFamily());
    numHeads = options.getNumHeads();
    numValueHeads = options.getNumValueHeads();
    keyDim = options.getKeyDim();
    valueDim = options.getValueDim();
    scale = options.getScale();
    featureMap = FeatureMap.of(options.getFeatureMap());
    normalize = options.getNormalize() != 0;
    normalizeEps = options.getNormalizeEps();
    qkL2norm = options.getQkL2norm() != 0;
    betaSigmoid = options.getBetaSigmoid() != 0;
    gateRaw = options.getGateRaw() != 0;
    allowNegEigval = options.getAllowNegEigval() != 0;
    gateLowerBound = options.getGateLowerBound();
    stateDtype = Dtype.of(options.getStateDtype());
    convSize = options.getConvSize();
    convActivation = ConvActivation.of(options.getConvActivation());
    return this;
  }

  /** A native copy, which the caller closes. */
  org.lumen.capi.LayerOptions toNative() {
    org.lumen.capi.LayerOptions options = new org.lumen.capi.LayerOptions();
    options.setFamily(family.value());
    options.setNumHeads(numHeads);
    options.setNumValueHeads(numValueHeads);
    options.setKeyDim(keyDim);
    options.setValueDim(valueDim);
    options.setScale(scale);
    options.setFeatureMap(featureMap.value());
    options.setNormalize(normalize ? 1 : 0);
    options.setNormalizeEps(normalizeEps);
    options.setQkL2norm(qkL2norm ? 1 : 0);
    options.setBetaSigmoid(betaSigmoid ? 1 : 0);
    options.setGateRaw(gateRaw ? 1 : 0);
    options.setAllowNegEigval(allowNegEigval ? 1 : 0);
    options.setGateLowerBound(gateLowerBound);
    options.setStateDtype(stateDtype.value());
    options.setConvSize(convSize);
    options.setConvActivation(convActivation.value());
    return options;
  }

  /** The layer's family. */
  public Family family() { return family; }
  /** Sets the family. */
  public LayerOptions family(Family family) {
    this.family = Objects.requireNonNull(family, "family");
    return this;
  }

  /** H, query/key heads. */
  public int numHeads() { return numHeads; }
  /** Sets H (required, > 0). */
  public LayerOptions numHeads(int numHeads) {
    this.numHeads = numHeads;
    return this;
  }

  /** HV, value heads (0: H). */
  public int numValueHeads() { return numValueHeads; }
  /** Sets HV, a multiple of H (0: H). */
  public LayerOptions numValueHeads(int numValueHeads) {
    this.numValueHeads = numValueHeads;
    return this;
  }

  /** K, the key dimension of a head. */
  public int keyDim() { return keyDim; }
  /** Sets K (required, > 0). */
  public LayerOptions keyDim(int keyDim) {
    this.keyDim = keyDim;
    return this;
  }

  /** V, the value dimension of a head. */
  public int valueDim() { return valueDim; }
  /** Sets V (required, > 0). */
  public LayerOptions valueDim(int valueDim) {
    this.valueDim = valueDim;
    return this;
  }

  /** What multiplies q (0: K^-0.5). */
  public float scale() { return scale; }
  /** Sets what multiplies q (0: K^-0.5; Mamba-2 uses 1). */
  public LayerOptions scale(float scale) {
    this.scale = scale;
    return this;
  }

  /** phi of linear_attn. */
  public FeatureMap featureMap() { return featureMap; }
  /** Sets phi (linear_attn only). */
  public LayerOptions featureMap(FeatureMap featureMap) {
    this.featureMap = Objects.requireNonNull(featureMap, "featureMap");
    return this;
  }

  /** Whether linear_attn keeps z and divides by q.z + eps. */
  public boolean normalize() { return normalize; }
  /** Sets whether linear_attn keeps z and divides by q.z + eps (linear_attn only). */
  public LayerOptions normalize(boolean normalize) {
    this.normalize = normalize;
    return this;
  }

  /** The eps of normalize (0: 1e-6). */
  public float normalizeEps() { return normalizeEps; }
  /**
   * Sets the eps of normalize (0: 1e-6); fla's linear attention uses 1e-10: set that to match
   * its outputs.
   */
  public LayerOptions normalizeEps(float normalizeEps) {
    this.normalizeEps = normalizeEps;
    return this;
  }

  /** Whether q and k are L2-normalised inside the layer. */
  public boolean qkL2norm() { return qkL2norm; }
  /** Sets whether q and k are L2-normalised inside the layer (before phi and scale). */
  public LayerOptions qkL2norm(boolean qkL2norm) {
    this.qkL2norm = qkL2norm;
    return this;
  }

  /** Whether beta arrives as a logit. */
  public boolean betaSigmoid() { return betaSigmoid; }
  /** Sets whether beta arrives as a logit (the delta family only). */
  public LayerOptions betaSigmoid(boolean betaSigmoid) {
    this.betaSigmoid = betaSigmoid;
    return this;
  }

  /** Whether g arrives raw (A_log and dt_bias then needed). */
  public boolean gateRaw() { return gateRaw; }
  /** Sets whether g arrives raw (gated_delta_net, kda, ssd; needs A_log and dt_bias). */
  public LayerOptions gateRaw(boolean gateRaw) {
    this.gateRaw = gateRaw;
    return this;
  }

  /** Whether beta may lie in [0, 2] (fla's allow_neg_eigval). */
  public boolean allowNegEigval() { return allowNegEigval; }
  /**
   * Sets whether beta may lie in [0, 2], so that the state's transition may have negative
   * eigenvalues (fla's allow_neg_eigval; the delta family only): with betaSigmoid, beta =
   * 2 * sigmoid(logit).
   */
  public LayerOptions allowNegEigval(boolean allowNegEigval) {
    this.allowNegEigval = allowNegEigval;
    return this;
  }

  /** The lower bound of the raw gate (0: the unbounded raw gate). */
  public float gateLowerBound() { return gateLowerBound; }
  /**
   * Sets fla's lower-bounded gate (lower_bound; gated_delta_net and kda with gateRaw): g =
   * bound * sigmoid(exp(A_log) * (g + dt_bias)), in (bound, 0); 0 (default) keeps the raw gate.
   */
  public LayerOptions gateLowerBound(float gateLowerBound) {
    this.gateLowerBound = gateLowerBound;
    return this;
  }

  /** The dtype of the stored state. */
  public Dtype stateDtype() { return stateDtype; }
  /** Sets the dtype of the stored state: FLOAT32 (default) or BFLOAT16. */
  public LayerOptions stateDtype(Dtype stateDtype) {
    this.stateDtype = Objects.requireNonNull(stateDtype, "stateDtype");
    return this;
  }

  /** W, the width of the short convolution (0: none). */
  public int convSize() { return convSize; }
  /** Sets W, 0 (no convolution) to 64; its weights are parameters (ModelBuilder.setParam). */
  public LayerOptions convSize(int convSize) {
    this.convSize = convSize;
    return this;
  }

  /** The activation after the convolution. */
  public ConvActivation convActivation() { return convActivation; }
  /** Sets the activation after the convolution (default SILU). */
  public LayerOptions convActivation(ConvActivation convActivation) {
    this.convActivation = Objects.requireNonNull(convActivation, "convActivation");
    return this;
  }

  @Override
  public String toString() {
    return "LayerOptions[family=" + family + ", numHeads=" + numHeads + ", numValueHeads="
        + numValueHeads + ", keyDim=" + keyDim + ", valueDim=" + valueDim + ", scale=" + scale
        + ", featureMap=" + featureMap + ", normalize=" + normalize + ", normalizeEps="
        + normalizeEps + ", qkL2norm=" + qkL2norm + ", betaSigmoid=" + betaSigmoid
        + ", gateRaw=" + gateRaw + ", allowNegEigval=" + allowNegEigval + ", gateLowerBound="
        + gateLowerBound + ", stateDtype=" + stateDtype + ", convSize=" + convSize
        + ", convActivation=" + convActivation + "]";
  }
}
