// Speculative decoding against one gated_delta_net layer: a draft proposes N tokens, the layer
// runs them tentatively (every token's output, no state written), the caller accepts a prefix
// and commits it, then steps the layer's own token where the draft was rejected. At the end the
// session is checked, bit for bit, against one that stepped only the kept tokens.
// Run: java -cp <build>/bindings/java/lumen.jar examples/java/DraftVerify.java
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.lumen.Engine;
import org.lumen.Family;
import org.lumen.LayerOptions;
import org.lumen.Model;
import org.lumen.ModelBuilder;
import org.lumen.Session;
import org.lumen.StatePart;

public class DraftVerify {
  static final int H = 2, K = 4, V = 4, N = 4, ROUNDS = 5;

  /** A stand-in for a small model's proposal: q, k, v of tokens [t, t + n). */
  static float[][] draft(int t, int n) {
    float[][] x = {new float[n * H * K], new float[n * H * K], new float[n * H * V]};
    int[] widths = {H * K, H * K, H * V};
    for (int part = 0; part < 3; ++part) {
      for (int i = 0; i < x[part].length; ++i) {
        int token = t + i / widths[part], at = i % widths[part];
        x[part][i] = (float) Math.sin(0.37 * at + 1.3 * token + part);
      }
    }
    return x;
  }

  static float[] fill(int count, float value) {
    float[] out = new float[count];
    Arrays.fill(out, value);
    return out;
  }

  static float[] token(float[] x, int t, int width) {
    return Arrays.copyOfRange(x, t * width, (t + 1) * width);
  }

  public static void main(String[] args) {
    float[] g = fill(H, -0.1f), beta = fill(H, 0.5f);
    try (ModelBuilder builder = new ModelBuilder()) {
      builder.addLayer(new LayerOptions(Family.GATED_DELTA_NET).numHeads(H).keyDim(K).valueDim(V)
          .qkL2norm(true));
      try (Model model = builder.build(); Engine engine = new Engine(model);
           Session session = engine.newSession(); Session plain = engine.newSession()) {
        int t = 0;
        for (int round = 0; round < ROUNDS; ++round) {
          float[][] x = draft(t, N);
          float[] o = session.stepTentative(0, x[0], x[1], x[2], fill(N * H, -0.1f),
                                            fill(N * H, 0.5f));
          // Accept while the layer agrees with the draft (here: o[0] of the token is positive).
          int accepted = 0;
          while (accepted < N && o[accepted * H * V] > 0) ++accepted;
          session.commit(accepted);
          List<float[][]> kept = new ArrayList<>();
          for (int i = 0; i < accepted; ++i) {
            kept.add(new float[][] {token(x[0], i, H * K), token(x[1], i, H * K),
                                    token(x[2], i, H * V)});
          }
          if (accepted < N) {  // the layer's own token replaces the rejected draft token
            float[][] own = draft(t + 1000, 1);
            session.step(0, own[0], own[1], own[2], g, beta);
            kept.add(own);
          }
          for (float[][] k : kept) plain.step(0, k[0], k[1], k[2], g, beta);  // the reference
          t += kept.size();
          System.out.printf("round %d: accepted %d of %d draft tokens%n", round, accepted, N);
        }
        boolean same = Arrays.equals(session.readState(0, StatePart.MATRIX),
                                     plain.readState(0, StatePart.MATRIX));
        System.out.printf("%d tokens consumed; state %s plain steps bit for bit%n", t,
                          same ? "equals" : "DIFFERS FROM");
        if (!same) System.exit(1);
      }
    }
  }
}
