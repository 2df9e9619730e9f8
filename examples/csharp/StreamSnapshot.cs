// Builds a two-layer model, prefills a prompt, steps, saves the session to a file, loads it
// into a new session and checks that both continue with the same outputs.
// Build: mcs -r:<build>/bindings/csharp/Lumen.dll StreamSnapshot.cs; run next to Lumen.dll.
using System;
using System.Linq;
using Lumen;
using Lumen.CApi;

public static class StreamSnapshot {
  const int H = 2, K = 4, V = 4, Prompt = 8;

  static float[] Values(int count, int t, double salt) =>
      Enumerable.Range(0, count).Select(i => (float)Math.Sin(0.37 * i + 1.3 * t + salt))
          .ToArray();

  static float[] Fill(int count, float value) => Enumerable.Repeat(value, count).ToArray();

  // One token through both layers (layer 0 gated, layer 1 retention); both outputs.
  static float[] Step(Session session, int t) {
    float[] q = Values(H * K, t, 0), k = Values(H * K, t, 1), v = Values(H * V, t, 2);
    float[] o0 = session.Step(0, q, k, v, Fill(H, -0.1f), Fill(H, 0.5f));
    float[] o1 = session.Step(1, q, k, v);
    return o0.Concat(o1).ToArray();
  }

  public static int Main(string[] args) {
    string path = args.Length > 0 ? args[0] : "stream_snapshot.lumen";
    using (var gated = new LayerOptions {
             Family = LumenFamily.GATED_DELTA_NET, NumHeads = H, KeyDim = K, ValueDim = V,
             QkL2norm = true })  // the delta rule wants unit-norm keys
    using (var retention = new LayerOptions {
             Family = LumenFamily.RETENTION, NumHeads = H, KeyDim = K, ValueDim = V })
    using (var builder = new ModelBuilder()) {
      builder.AddLayer(gated);
      builder.AddLayer(retention);
      using (Model model = builder.Build())
      using (var engine = new Engine(model))
      using (Session session = engine.NewSession())
      using (Session resumed = engine.NewSession()) {
        float[] q = Values(Prompt * H * K, 100, 0), k = Values(Prompt * H * K, 100, 1);
        float[] v = Values(Prompt * H * V, 100, 2);
        session.Prefill(0, q, k, v, Fill(Prompt * H, -0.1f), Fill(Prompt * H, 0.5f));
        session.Prefill(1, q, k, v);
        float[] o = Step(session, 0);
        Console.WriteLine("after the prompt and one step: o[0..{0}] = {1}", V - 1,
                          string.Join(" ", o.Take(V).Select(x => x.ToString("F4"))));

        session.Save(path);
        resumed.Load(path);
        for (int t = 1; t <= 4; ++t) {
          if (!Step(session, t).SequenceEqual(Step(resumed, t))) {
            Console.Error.WriteLine("token {0}: the loaded session differs", t);
            return 1;
          }
        }
        Console.WriteLine("saved to {0}, loaded, and 4 more tokens match bit for bit", path);
      }
    }
    return 0;
  }
}
