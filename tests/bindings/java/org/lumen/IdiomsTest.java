package org.lumen;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.lumen.capi.Capi;
import org.lumen.capi.LumenBackend;
import org.lumen.capi.LumenConvActivation;
import org.lumen.capi.LumenDtype;
import org.lumen.capi.LumenFamily;
import org.lumen.capi.LumenFeatureMap;
import org.lumen.capi.LumenParam;
import org.lumen.capi.LumenStateLayout;
import org.lumen.capi.LumenStatePart;
import org.lumen.capi.LumenStatus;

/**
 * org.lumen reads as Java: enums for lumen.h's enumerations, plain options objects with every
 * field of the header's structs, presets without the raw layer, and an exception whose status
 * is an enum. Checked against the raw layer (org.lumen.capi), so that what lumen.h adds is
 * missed by no one.
 */
class IdiomsTest {
  /** Every constant of a raw enumeration class, by name. */
  static List<Field> constants(Class<?> raw) {
    List<Field> fields = new ArrayList<>();
    for (Field field : raw.getFields()) {
      if (Modifier.isStatic(field.getModifiers()) && field.getType() == int.class) {
        fields.add(field);
      }
    }
    return fields;
  }

  static <E extends Enum<E>> void sameConstants(Class<?> raw, Class<E> idiomatic)
      throws Exception {
    List<Field> fields = constants(raw);
    Method value = idiomatic.getMethod("value");
    Method of = idiomatic.getMethod("of", int.class);
    for (Field field : fields) {
      E constant = Enum.valueOf(idiomatic, field.getName());
      assertEquals(field.getInt(null), value.invoke(constant), field.getName());
      assertEquals(constant, of.invoke(null, field.getInt(null)));
    }
    int extra = idiomatic == Status.class ? 1 : 0; // Status.UNKNOWN
    assertEquals(fields.size() + extra, idiomatic.getEnumConstants().length,
                 idiomatic.getSimpleName() + " and " + raw.getSimpleName() + " differ");
  }

  @Test
  void everyEnumerationOfTheHeaderIsAJavaEnum() throws Exception {
    sameConstants(LumenFamily.class, Family.class);
    sameConstants(LumenStatus.class, Status.class);
    sameConstants(LumenBackend.class, Backend.class);
    sameConstants(LumenDtype.class, Dtype.class);
    sameConstants(LumenStatePart.class, StatePart.class);
    sameConstants(LumenStateLayout.class, StateLayout.class);
    sameConstants(LumenFeatureMap.class, FeatureMap.class);
    sameConstants(LumenConvActivation.class, ConvActivation.class);
    sameConstants(LumenParam.class, Param.class);
    assertThrows(IllegalArgumentException.class, () -> Family.of(0));
    assertEquals(Status.UNKNOWN, Status.of(1000));
  }

  static String lowerCamel(String snake) {
    StringBuilder out = new StringBuilder();
    boolean upper = false;
    for (char c : snake.toCharArray()) {
      if (c == '_') {
        upper = true;
      } else {
        out.append(upper ? Character.toUpperCase(c) : c);
        upper = false;
      }
    }
    return out.toString();
  }

  /** A field's value as the raw struct holds it: enums by value, booleans as 0/1. */
  static Object raw(Object value) throws Exception {
    if (value instanceof Boolean) return (Boolean) value ? 1 : 0;
    if (value instanceof Enum) return value.getClass().getMethod("value").invoke(value);
    return value;
  }

  /** Every field of a raw options struct, through its getter, equals the options object's. */
  static void sameFields(Object rawOptions, Object options) throws Exception {
    int fields = 0;
    for (Method getter : rawOptions.getClass().getMethods()) {
      if (!getter.getName().startsWith("get") || getter.getParameterCount() != 0
          || getter.getDeclaringClass() != rawOptions.getClass()) {
        continue;
      }
      String name = Character.toLowerCase(getter.getName().charAt(3))
                    + getter.getName().substring(4);
      Method mine = options.getClass().getMethod(name);
      assertEquals(getter.invoke(rawOptions), raw(mine.invoke(options)), name);
      Method setter = options.getClass().getMethod(name, mine.getReturnType());
      assertEquals(options.getClass(), setter.getReturnType(), name);
      ++fields;
    }
    assertTrue(fields > 0);
  }

  @Test
  void optionsObjectsHaveEveryFieldOfTheStructs() throws Exception {
    try (org.lumen.capi.LayerOptions layer = new org.lumen.capi.LayerOptions();
         org.lumen.capi.EngineOptions engine = new org.lumen.capi.EngineOptions();
         org.lumen.capi.SnapshotOptions snapshot = new org.lumen.capi.SnapshotOptions()) {
      layer.setFamily(LumenFamily.KDA);
      sameFields(layer, new LayerOptions(Family.KDA));
      sameFields(engine, new EngineOptions());
      sameFields(snapshot, new SnapshotOptions());
    }
  }

  @Test
  void everyPresetIsALayerOptionsFactory() throws Exception {
    int presets = 0;
    for (Method init : Capi.class.getMethods()) {
      String prefix = "lumen_layer_options_init_";
      if (!init.getName().startsWith(prefix)) continue;
      Method factory = LayerOptions.class.getMethod(
          lowerCamel(init.getName().substring(prefix.length())));
      assertTrue(Modifier.isStatic(factory.getModifiers()), factory.getName());
      try (org.lumen.capi.LayerOptions expected = new org.lumen.capi.LayerOptions()) {
        init.invoke(null, expected);
        sameFields(expected, factory.invoke(null));
      }
      ++presets;
    }
    assertEquals(3, presets);
    LayerOptions qwen = LayerOptions.qwen3NextGatedDeltaNet();
    assertEquals(Family.GATED_DELTA_NET, qwen.family());
    assertEquals(32, qwen.numValueHeads());
  }

  @Test
  void aPresetBuildsWithItsParameters() {
    LayerOptions preset = LayerOptions.mamba2();
    int channels = preset.numHeads() * preset.keyDim();
    int values = preset.numValueHeads() * preset.valueDim();
    try (ModelBuilder builder = new ModelBuilder()) {
      int layer = builder.addLayer(preset);
      builder.setParam(layer, Param.A_LOG, new float[preset.numValueHeads()])
          .setParam(layer, Param.DT_BIAS, new float[preset.numValueHeads()])
          .setParam(layer, Param.CONV_Q_WEIGHT, new float[channels * preset.convSize()])
          .setParam(layer, Param.CONV_K_WEIGHT, new float[channels * preset.convSize()])
          .setParam(layer, Param.CONV_V_WEIGHT, new float[values * preset.convSize()]);
      try (Model model = builder.build()) {
        LayerOptions built = model.layerOptions(layer);
        assertEquals(Family.SSD, built.family());
        assertEquals(80, built.numValueHeads());
        assertEquals(1.0f, built.scale());
        assertEquals(channels * (preset.convSize() - 1),
                     model.stateCount(layer, StatePart.CONV_Q));
      }
    }
  }

  @Test
  void layerOptionsRoundTripThroughAModel() throws Exception {
    LayerOptions gated = new LayerOptions(Family.GATED_DELTA_NET).numHeads(2).numValueHeads(4)
        .keyDim(8).valueDim(6).scale(0.5f).qkL2norm(true).betaSigmoid(true).gateRaw(true)
        .stateDtype(Dtype.BFLOAT16).convSize(3).convActivation(ConvActivation.NONE)
        .normalizeEps(1e-5f);
    LayerOptions linear = new LayerOptions(Family.LINEAR_ATTN).numHeads(1).numValueHeads(1)
        .keyDim(4).valueDim(4).scale(1).featureMap(FeatureMap.ELU1).normalize(true)
        .normalizeEps(1e-4f);
    try (ModelBuilder builder = new ModelBuilder()) {
      int layer = builder.addLayer(gated);
      builder.setParam(layer, Param.A_LOG, new float[4])
          .setParam(layer, Param.DT_BIAS, new float[4])
          .setParam(layer, Param.CONV_Q_WEIGHT, new float[16 * 3])
          .setParam(layer, Param.CONV_K_WEIGHT, new float[16 * 3])
          .setParam(layer, Param.CONV_V_WEIGHT, new float[24 * 3]);
      builder.addLayer(linear);
      try (Model model = builder.build()) {
        for (int i = 0; i < 2; ++i) {
          try (org.lumen.capi.LayerOptions raw = model.layerOptions(i).toNative()) {
            sameFields(raw, i == 0 ? gated : linear);
          }
        }
      }
    }
  }

  @Test
  void allowNegEigvalTakesBetaUpToTwo() {
    // fla's allow_neg_eigval: beta in [0, 2]. One token from a zero state with a unit key:
    // the state becomes beta k v^T, so o = beta (q . k) v.
    float[] q = {1, 0, 0, 0}, k = {1, 0, 0, 0}, v = {1, 2, 3, 4};
    try (ModelBuilder builder = new ModelBuilder()) {
      builder.addLayer(new LayerOptions(Family.DELTA_NET).numHeads(1).keyDim(4).valueDim(4)
          .scale(1).allowNegEigval(true));
      builder.addLayer(new LayerOptions(Family.DELTA_NET).numHeads(1).keyDim(4).valueDim(4)
          .scale(1));
      try (Model model = builder.build(); Engine engine = new Engine(model);
           Session session = engine.newSession()) {
        assertTrue(model.layerOptions(0).allowNegEigval());
        float[] o = session.step(0, q, k, v, null, new float[] {1.5f});
        assertArrayEquals(new float[] {1.5f, 3, 4.5f, 6}, o);
        LumenException twoAndAHalf = assertThrows(LumenException.class,
            () -> session.step(0, q, k, v, null, new float[] {2.5f}));
        assertTrue(twoAndAHalf.getMessage().contains("must lie in [0, 2]"),
                   twoAndAHalf.getMessage());
        LumenException without = assertThrows(LumenException.class,
            () -> session.step(1, q, k, v, null, new float[] {1.5f}));
        assertTrue(without.getMessage().contains("must lie in [0, 1]"), without.getMessage());
      }
    }
  }

  @Test
  void gateLowerBoundIsFlasLowerBoundedGate() {
    // gated_delta_net, K = V = 1, A_log = dt_bias = 0, raw gates 0: the lower-bounded gate is
    // -2 * sigmoid(0) = -1, the raw gate -softplus(0) = -ln 2. A first token writes S = 1 (beta
    // 1); a second with beta 0 only decays it, so it reads exp(g).
    float[] one = {1}, zero = {0};
    try (ModelBuilder builder = new ModelBuilder()) {
      for (float bound : new float[] {-2, 0}) {
        int layer = builder.addLayer(new LayerOptions(Family.GATED_DELTA_NET).numHeads(1)
            .keyDim(1).valueDim(1).gateRaw(true).gateLowerBound(bound));
        builder.setParam(layer, Param.A_LOG, new float[1]).setParam(layer, Param.DT_BIAS,
                                                                     new float[1]);
      }
      try (Model model = builder.build(); Engine engine = new Engine(model);
           Session session = engine.newSession()) {
        assertEquals(-2.0f, model.layerOptions(0).gateLowerBound());
        for (int layer = 0; layer < 2; ++layer) {
          assertEquals(1.0f, session.step(layer, one, one, one, zero, one)[0]);
          float read = session.step(layer, one, one, one, zero, zero)[0];
          assertEquals(layer == 0 ? Math.exp(-1) : 0.5, read, 1e-6);
        }
      }
    }
  }

  @Test
  void statesMoveInFlasLayout() {
    // A gla layer, HV = 1, K = 2, V = 3, a convolution of width 3 (channels: H*K = 2 for q).
    try (ModelBuilder builder = new ModelBuilder()) {
      int layer = builder.addLayer(new LayerOptions(Family.GLA).numHeads(1).keyDim(2)
          .valueDim(3).convSize(3));
      builder.setParam(layer, Param.CONV_Q_WEIGHT, new float[6])
          .setParam(layer, Param.CONV_K_WEIGHT, new float[6])
          .setParam(layer, Param.CONV_V_WEIGHT, new float[9]);
      try (Model model = builder.build(); Engine engine = new Engine(model);
           Session session = engine.newSession()) {
        assertEquals(6, model.stateCount(0, StatePart.CONV_Q, StateLayout.FLA));
        float[] canonical = {1, 2, 3, 4, 5, 6}; // [K, V]
        session.writeState(0, StatePart.MATRIX, canonical);
        assertArrayEquals(new float[] {1, 4, 2, 5, 3, 6}, // [V, K]
                          session.readState(0, StatePart.MATRIX, StateLayout.FLA));
        session.writeState(0, StatePart.CONV_Q, StateLayout.FLA, new float[] {9, 1, 2, 9, 3, 4});
        assertArrayEquals(new float[] {1, 2, 3, 4}, session.readState(0, StatePart.CONV_Q));
        assertArrayEquals(new float[] {0, 1, 2, 0, 3, 4},
                          session.readState(0, StatePart.CONV_Q, StateLayout.FLA));
        assertThrows(LumenException.class,
            () -> session.writeState(0, StatePart.CONV_Q, StateLayout.FLA, new float[4]));
      }
    }
  }

  @Test
  void statusesBackendsAndClosedObjectsReadAsJava() {
    try (ModelBuilder builder = new ModelBuilder()) {
      builder.addLayer(new LayerOptions(Family.RETENTION).numHeads(1).keyDim(4).valueDim(4));
      Model model = builder.build();
      Engine engine = new Engine(model);
      try (Session session = engine.newSession()) {
        assertEquals(Backend.CPU, engine.backend());
        LumenException error = assertThrows(LumenException.class, () -> session.tokens(3));
        assertEquals(Status.OUT_OF_RANGE, error.status());
        assertEquals(LumenStatus.OUT_OF_RANGE, error.statusCode());
        assertEquals("LUMEN_ERROR_OUT_OF_RANGE", error.statusName());
        LumenException shape = assertThrows(LumenException.class,
            () -> session.step(3, new float[4], new float[4], new float[4], null, null));
        assertEquals(Status.OUT_OF_RANGE, shape.status());
        model.close(); // the engine keeps the native model: its sessions still read states
        assertEquals(16, session.readState(0, StatePart.MATRIX).length);
        engine.close();
        assertThrows(IllegalStateException.class, engine::newSession);
        assertEquals(0, session.tokens(0));
      } finally {
        engine.close();
        model.close(); // a second close does nothing
      }
    }
  }

  @Test
  void rawOptionsStructsAreAutoCloseable() {
    org.lumen.capi.LayerOptions closed;
    try (org.lumen.capi.LayerOptions options = new org.lumen.capi.LayerOptions()) {
      options.setNumHeads(3);
      assertEquals(3, options.getNumHeads());
      closed = options;
    }
    IllegalStateException error = assertThrows(IllegalStateException.class, closed::getNumHeads);
    assertTrue(error.getMessage().contains("closed"), error.getMessage());
    assertThrows(IllegalStateException.class, () -> closed.setNumHeads(1));
  }
}
