// Speculative decoding against one gated_delta_net layer: a draft proposes N tokens, the layer
// runs them tentatively (every token's output, no state written), the caller accepts a prefix
// and commits it, then steps the layer's own token where the draft was rejected. At the end the
// session is checked, bit for bit, against one that stepped only the kept tokens.
// Build: mcs -r:<build>/bindings/csharp/Lumen.dll DraftVerify.cs; run next to Lumen.dll.
using System;
using System.Collections.Generic;
using System.Linq;
using Lumen;
using Lumen.CApi;

public static class DraftVerify {
  const int H = 2, K = 4, V = 4, N = 4, Rounds = 5;

  // A stand-in for a small model's proposal: q, k, v of token t.
  static float[][] Draft(int t) =>
      new[] { Values(H * K, t, 0), Values(H * K, t, 1), Values(H * V, t, 2) };

  static float[] Values(int count, int t, double salt) =>
      Enumerable.Range(0, count).Select(i => (float)Math.Sin(0.37 * i + 1.3 * t + salt))
          .ToArray();

  // One part (0 q, 1 k, 2 v) of several tokens, back to back.
  static float[] Joined(float[][][] tokens, int part) =>
      tokens.SelectMany(x => x[part]).ToArray();

  static float[] Fill(int count, float value) => Enumerable.Repeat(value, count).ToArray();

  public static int Main() {
    float[] g = Fill(H, -0.1f), beta = Fill(H, 0.5f);
    using (var layer = new LayerOptions {
             Family = LumenFamily.GATED_DELTA_NET, NumHeads = H, KeyDim = K, ValueDim = V,
             QkL2norm = true })
    using (var builder = new ModelBuilder()) {
      builder.AddLayer(layer);
      using (Model model = builder.Build())
      using (var engine = new Engine(model))
      using (Session session = engine.NewSession())
      using (Session plain = engine.NewSession()) {
        int t = 0;
        for (int round = 0; round < Rounds; ++round) {
          float[][][] tokens = Enumerable.Range(t, N).Select(Draft).ToArray();
          float[] o = session.StepTentative(0, Joined(tokens, 0), Joined(tokens, 1),
                                            Joined(tokens, 2), Fill(N * H, -0.1f),
                                            Fill(N * H, 0.5f));
          // Accept while the layer agrees with the draft (here: o[0] of the token is positive).
          int accepted = 0;
          while (accepted < N && o[accepted * H * V] > 0) ++accepted;
          session.Commit(accepted);
          var kept = new List<float[][]>(tokens.Take(accepted));
          if (accepted < N) {  // the layer's own token replaces the rejected draft token
            float[][] own = Draft(t + 1000);
            session.Step(0, own[0], own[1], own[2], g, beta);
            kept.Add(own);
          }
          foreach (float[][] x in kept) plain.Step(0, x[0], x[1], x[2], g, beta);  // reference
          t += kept.Count;
          Console.WriteLine("round {0}: accepted {1} of {2} draft tokens", round, accepted, N);
        }
        bool same = session.ReadState(0).SequenceEqual(plain.ReadState(0));
        Console.WriteLine("{0} tokens consumed; state {1} plain steps bit for bit", t,
                          same ? "equals" : "DIFFERS FROM");
        return same ? 0 : 1;
      }
    }
  }
}
