// Builds a two-layer model, prefills a prompt, steps, saves the session to a file, loads it
// into a new session and checks that both continue with the same outputs.
// Run: java -cp <build>/bindings/java/lumen.jar examples/java/StreamSnapshot.java [file]
// (or -cp lumen-<version>.jar, the jar that carries the native libraries).
import java.util.Arrays;
import org.lumen.Engine;
import org.lumen.Family;
import org.lumen.LayerOptions;
import org.lumen.Model;
import org.lumen.ModelBuilder;
import org.lumen.Session;

public class StreamSnapshot {
  static final int H = 2, K = 4, V = 4, PROMPT = 8;

  /** Deterministic inputs: n values for tokens [t, t + n / width). */
  static float[] values(int count, int t, double salt) {
    float[] out = new float[count];
    for (int i = 0; i < count; ++i) out[i] = (float) Math.sin(0.37 * i + 1.3 * t + salt);
    return out;
  }

  static float[] fill(int count, float value) {
    float[] out = new float[count];
    Arrays.fill(out, value);
    return out;
  }

  /** One token through both layers (layer 0 gated, layer 1 retention); returns both outputs. */
  static float[] step(Session session, int t) {
    float[] q = values(H * K, t, 0), k = values(H * K, t, 1), v = values(H * V, t, 2);
    float[] o0 = session.step(0, q, k, v, fill(H, -0.1f), fill(H, 0.5f));
    float[] o1 = session.step(1, q, k, v, null, null);
    float[] both = Arrays.copyOf(o0, o0.length + o1.length);
    System.arraycopy(o1, 0, both, o0.length, o1.length);
    return both;
  }

  public static void main(String[] args) throws Exception {
    String path = args.length > 0 ? args[0] : "stream_snapshot.lumen";
    try (ModelBuilder builder = new ModelBuilder()) {
      // The delta rule wants unit-norm keys: qkL2norm normalises them inside the layer.
      builder.addLayer(new LayerOptions(Family.GATED_DELTA_NET).numHeads(H).keyDim(K).valueDim(V)
                       .qkL2norm(true));
      builder.addLayer(new LayerOptions(Family.RETENTION).numHeads(H).keyDim(K).valueDim(V));
      try (Model model = builder.build();
           Engine engine = new Engine(model);
           Session session = engine.newSession();
           Session resumed = engine.newSession()) {
        // The prompt: PROMPT tokens per layer in one prefill each.
        float[] q = values(PROMPT * H * K, 100, 0), k = values(PROMPT * H * K, 100, 1);
        float[] v = values(PROMPT * H * V, 100, 2);
        session.prefill(0, q, k, v, fill(PROMPT * H, -0.1f), fill(PROMPT * H, 0.5f));
        session.prefill(1, q, k, v, null, null);
        float[] o = step(session, 0);
        System.out.printf("after the prompt and one step: o[0..%d] = %s%n", V - 1,
                          Arrays.toString(Arrays.copyOf(o, V)));

        session.save(path);
        resumed.load(path);
        for (int t = 1; t <= 4; ++t) {
          float[] expected = step(session, t), actual = step(resumed, t);
          if (!Arrays.equals(expected, actual)) {
            System.err.println("token " + t + ": the loaded session differs");
            System.exit(1);
          }
        }
        System.out.println("saved to " + path + ", loaded, and 4 more tokens match bit for bit");
      }
    }
  }
}
