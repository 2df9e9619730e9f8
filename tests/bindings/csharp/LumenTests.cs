// The C# binding against lumen.h's contract: a checked test program (exit code 1 on any
// failure). Usage: mono LumenTests.exe <path of lumen.h> <scratch directory>
using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Runtime.InteropServices;
using System.Text.RegularExpressions;
using System.Threading;
using Lumen;
using Lumen.CApi;

public static class LumenTests {
  const int H = 2, HV = 4, K = 8, V = 6;
  static readonly Random random = new Random(11);
  static string header, scratch;

  static void Check(bool condition, string what) {
    if (!condition) throw new Exception("check failed: " + what);
  }

  static T Throws<T>(Action action, string what) where T : Exception {
    try {
      action();
    } catch (T e) {
      return e;
    }
    throw new Exception("expected " + typeof(T).Name + ": " + what);
  }

  static LayerOptions Layer(LumenFamily family, int heads, int valueHeads, int k, int v) =>
      new LayerOptions { Family = family, NumHeads = heads, NumValueHeads = valueHeads,
                         KeyDim = k, ValueDim = v };

  static Engine NewEngine(out Model model) {
    using (var builder = new ModelBuilder())
    using (var gated = Layer(LumenFamily.GATED_DELTA_NET, H, HV, K, V))
    using (var retention = Layer(LumenFamily.RETENTION, H, H, K, V)) {
      builder.AddLayer(gated);
      builder.AddLayer(retention);
      model = builder.Build();
    }
    using (var options = new EngineOptions { NumThreads = 2 }) return new Engine(model, options);
  }

  static double Gaussian() =>
      Math.Sqrt(-2 * Math.Log(1 - random.NextDouble())) * Math.Cos(2 * Math.PI * random.NextDouble());

  // q, k (unit rows), v, g, beta for `tokens` tokens.
  static float[][] Inputs(int tokens) {
    var q = new float[tokens * H * K]; var k = new float[tokens * H * K];
    var v = new float[tokens * HV * V]; var g = new float[tokens * HV];
    var beta = new float[tokens * HV];
    for (int i = 0; i < q.Length; ++i) q[i] = (float)Gaussian();
    for (int row = 0; row < tokens * H; ++row) {
      double norm = 0;
      for (int i = 0; i < K; ++i) { k[row * K + i] = (float)Gaussian(); norm += k[row * K + i] * k[row * K + i]; }
      for (int i = 0; i < K; ++i) k[row * K + i] /= (float)Math.Sqrt(norm);
    }
    for (int i = 0; i < v.Length; ++i) v[i] = (float)Gaussian();
    for (int i = 0; i < g.Length; ++i) g[i] = (float)-(0.01 + 0.5 * random.NextDouble());
    for (int i = 0; i < beta.Length; ++i) beta[i] = (float)(0.1 + 0.8 * random.NextDouble());
    return new[] {q, k, v, g, beta};
  }

  // Gated DeltaNet in float64, the recurrence of docs/spec.md §2: o [T, HV, V].
  static double[] Reference(float[][] x, int tokens) {
    var state = new double[HV, K, V];
    var o = new double[tokens * HV * V];
    double scale = 1 / Math.Sqrt(K);
    for (int t = 0; t < tokens; ++t)
      for (int hv = 0; hv < HV; ++hv) {
        int h = hv / (HV / H);
        double decay = Math.Exp(x[3][t * HV + hv]), beta = x[4][t * HV + hv];
        for (int i = 0; i < K; ++i) for (int j = 0; j < V; ++j) state[hv, i, j] *= decay;
        for (int j = 0; j < V; ++j) {
          double sk = 0;
          for (int i = 0; i < K; ++i) sk += state[hv, i, j] * x[1][(t * H + h) * K + i];
          double u = beta * (x[2][(t * HV + hv) * V + j] - sk);
          for (int i = 0; i < K; ++i) state[hv, i, j] += x[1][(t * H + h) * K + i] * u;
        }
        for (int j = 0; j < V; ++j) {
          double sum = 0;
          for (int i = 0; i < K; ++i) sum += state[hv, i, j] * scale * x[0][(t * H + h) * K + i];
          o[(t * HV + hv) * V + j] = sum;
        }
      }
    return o;
  }

  static double RelativeRms(float[] actual, double[] expected) {
    double error = 0, norm = 0;
    for (int i = 0; i < expected.Length; ++i) {
      error += (actual[i] - expected[i]) * (actual[i] - expected[i]);
      norm += expected[i] * expected[i];
    }
    return Math.Sqrt(error / norm);
  }

  static float[] Token(float[] a, int t, int width) => a.Skip(t * width).Take(width).ToArray();

  static void EveryHeaderFunctionIsReachable() {
    var methods = new HashSet<string>(typeof(Capi).GetMethods().Select(m => m.Name));
    var names = Regex.Matches(File.ReadAllText(header), @"LUMEN_API\s+[\w\s\*]+?\b(lumen_\w+)\s*\(")
                    .Cast<Match>().Select(m => m.Groups[1].Value).ToList();
    Check(names.Count > 30, "the header's functions were found");
    foreach (string name in names) Check(methods.Contains(name), name + " is in Capi");
  }

  static void StepAndPrefillMatchTheReference() {
    const int tokens = 19;
    float[][] x = Inputs(tokens);
    double[] expected = Reference(x, tokens);
    using (Engine engine = NewEngine(out Model model))
    using (model)
    using (Session stepped = engine.NewSession())
    using (Session prefilled = engine.NewSession()) {
      var o = new float[tokens * HV * V];
      for (int t = 0; t < tokens; ++t) {
        stepped.Step(0, Token(x[0], t, H * K), Token(x[1], t, H * K), Token(x[2], t, HV * V),
                     Token(x[3], t, HV), Token(x[4], t, HV)).CopyTo(o, t * HV * V);
      }
      Check(RelativeRms(o, expected) <= 1e-5, "step error " + RelativeRms(o, expected));
      Check(stepped.Tokens(0) == tokens, "token count");
      float[] p = prefilled.Prefill(0, x[0], x[1], x[2], x[3], x[4]);
      Check(RelativeRms(p, expected) <= 1e-4, "prefill error " + RelativeRms(p, expected));
    }
  }

  static void PointersAndBf16Inputs() {
    float[][] x = Inputs(1);
    using (Engine engine = NewEngine(out Model model))
    using (model)
    using (Session arrays = engine.NewSession())
    using (Session native = engine.NewSession())
    using (Session bf16 = engine.NewSession())
    using (Session rounded = engine.NewSession()) {
      float[] expected = arrays.Step(0, x[0], x[1], x[2], x[3], x[4]);
      var memory = x.Select(a => Marshal.AllocHGlobal(4 * a.Length)).ToArray();
      IntPtr o = Marshal.AllocHGlobal(4 * HV * V);
      try {
        for (int i = 0; i < 5; ++i) Marshal.Copy(x[i], 0, memory[i], x[i].Length);
        var inputs = new Inputs(Tensor.FromPointer(memory[0], x[0].Length),
                                Tensor.FromPointer(memory[1], x[1].Length),
                                Tensor.FromPointer(memory[2], x[2].Length),
                                Tensor.FromPointer(memory[3], x[3].Length),
                                Tensor.FromPointer(memory[4], x[4].Length));
        native.Step(0, inputs, Tensor.FromPointer(o, HV * V), LumenDtype.FLOAT32);
        var got = new float[HV * V];
        Marshal.Copy(o, got, 0, got.Length);
        Check(got.SequenceEqual(expected), "IntPtr inputs give the float[] result");
      } finally {
        foreach (IntPtr p in memory) Marshal.FreeHGlobal(p);
        Marshal.FreeHGlobal(o);
      }

      // bf16 bits in ushort[] against fp32 inputs holding the same rounded values.
      var bits = x.Select(a => a.Select(f => {
        uint u = BitConverter.ToUInt32(BitConverter.GetBytes(f), 0);
        return (ushort)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
      }).ToArray()).ToArray();
      var widened = bits.Select(a => a.Select(b => BitConverter.ToSingle(
          BitConverter.GetBytes((uint)b << 16), 0)).ToArray()).ToArray();
      var fromBf16 = new float[HV * V];
      bf16.Step(0, new Inputs(bits[0], bits[1], bits[2], bits[3], bits[4]) {
                  Dtype = LumenDtype.BFLOAT16 }, fromBf16);
      float[] fromRounded = rounded.Step(0, widened[0], widened[1], widened[2], widened[3], widened[4]);
      for (int i = 0; i < fromBf16.Length; ++i) {
        Check(Math.Abs(fromBf16[i] - fromRounded[i]) <= 1e-6 * Math.Max(1, Math.Abs(fromRounded[i])),
              "bf16 inputs match their fp32 values");
      }
      Throws<ArgumentException>(() => bf16.Step(0, new Inputs(bits[0], bits[1], bits[2]), fromBf16),
                                "ushort[] without a dtype");
    }
  }

  static void BatchedStepAndVarlenPrefillMatchSingleSessions() {
    const int n = 3;
    float[][] x = Inputs(n);
    using (Engine engine = NewEngine(out Model model))
    using (model) {
      Session[] batch = Enumerable.Range(0, n).Select(_ => engine.NewSession()).ToArray();
      Session[] singles = Enumerable.Range(0, n).Select(_ => engine.NewSession()).ToArray();
      float[] o = engine.StepBatch(0, batch, x[0], x[1], x[2], x[3], x[4]);
      for (int i = 0; i < n; ++i) {
        float[] single = singles[i].Step(0, Token(x[0], i, H * K), Token(x[1], i, H * K),
                                         Token(x[2], i, HV * V), Token(x[3], i, HV), Token(x[4], i, HV));
        Check(single.SequenceEqual(Token(o, i, HV * V)), "batched step " + i);
      }
      float[][] more = Inputs(9);
      engine.PrefillVarlen(0, batch, new[] {0, 4, 4, 9}, more[0], more[1], more[2], more[3], more[4]);
      Check(batch[0].Tokens(0) == 5 && batch[1].Tokens(0) == 1 && batch[2].Tokens(0) == 6,
            "varlen token counts");
      Throws<ArgumentException>(() => engine.PrefillVarlen(0, batch, new[] {0, 1}, more[0], more[1],
                                                           more[2], more[3], more[4]), "short offsets");
      foreach (Session s in batch.Concat(singles)) s.Dispose();
    }
  }

  static void SnapshotRoundTripsThroughBytesAndAFile() {
    float[][] x = Inputs(6);
    using (Engine engine = NewEngine(out Model model))
    using (model)
    using (Session session = engine.NewSession())
    using (Session fromBytes = engine.NewSession())
    using (Session fromFile = engine.NewSession()) {
      session.Prefill(0, x[0], x[1], x[2], x[3], x[4]);
      fromBytes.Restore(session.Snapshot());
      string path = Path.Combine(scratch, "csharp_session.lumen");
      session.Save(path);
      fromFile.Load(path);
      float[][] next = Inputs(1);
      float[] expected = session.Step(0, next[0], next[1], next[2], next[3], next[4]);
      foreach (Session restored in new[] {fromBytes, fromFile}) {
        Check(restored.Tokens(0) == 6, "restored token count");
        Check(restored.Step(0, next[0], next[1], next[2], next[3], next[4]).SequenceEqual(expected),
              "restored session continues bit for bit");
        Check(restored.ReadState(0).SequenceEqual(session.ReadState(0)), "restored state");
      }
    }
  }

  static void StoresSaveAndLoadByKeyWithVersions() {
    float[][] x = Inputs(2);
    string dir = Path.Combine(scratch, "csharp_store");
    using (Engine engine = NewEngine(out Model model))
    using (model)
    using (Store store = Store.Open("file://" + dir))
    using (Session a = engine.NewSession())
    using (Session b = engine.NewSession()) {
      a.Prefill(0, x[0], x[1], x[2], x[3], x[4]);
      Check(store.Save("chat", a) == 1, "first version");
      Check(store.Save("chat", a, expectedVersion: 1) == 2, "compare-and-set over version 1");
      Check(store.Load("chat", b) == 2, "loaded version");
      Check(b.ReadState(0).SequenceEqual(a.ReadState(0)), "loaded state");
      var conflict = Throws<LumenException>(() => store.Save("chat", b, expectedVersion: 1),
                                            "a stale version");
      Check(conflict.Status == LumenStatus.VERSION_CONFLICT, conflict.Message);
      var missing = Throws<LumenException>(() => store.Load("none", b), "a missing key");
      Check(missing.Status == LumenStatus.NOT_FOUND, missing.Message);
      store.Remove("chat");
    }
    Directory.Delete(dir, true);
  }

  static void SessionsBeyondTheBudgetSpillAndComeBackBitForBit() {
    float[][] x = Inputs(1);
    string dir = Path.Combine(scratch, "csharp_spill");
    Directory.CreateDirectory(dir);
    using (Engine unbounded = NewEngine(out Model model))
    using (model) {
      using (MemoryStats none = unbounded.Stats()) {
        Check(none.MemoryBudgetBytes == 0 && none.Evictions == 0, "no budget: every field 0");
      }
      long budget = 2 * model.StateBytes();
      using (var options = new EngineOptions { NumThreads = 1, MemoryBudgetBytes = budget,
                                               SpillDirectory = dir })
      using (var engine = new Engine(model, options))
      using (Session a = engine.NewSession()) {
        a.Step(0, x[0], x[1], x[2], x[3], x[4]);
        float[] before = a.ReadState(0);
        using (Session b = engine.NewSession())
        using (Session c = engine.NewSession()) {
          Check(!a.Resident && b.Resident && c.Resident, "the least recently used was evicted");
          using (MemoryStats stats = engine.Stats()) {
            Check(stats.MemoryBudgetBytes == budget, "the budget");
            Check(stats.ResidentSessions == 2 && stats.SpilledSessions == 1, "two in, one out");
            Check(stats.Evictions == 1 && stats.BytesEvicted > 0, "one eviction");
          }
          a.Prefetch();
          var watch = System.Diagnostics.Stopwatch.StartNew();
          while (!a.Resident && watch.Elapsed.TotalSeconds < 30) Thread.Sleep(1);
          Check(a.Resident, "the prefetch brought the session back");
          using (MemoryStats stats = engine.Stats()) Check(stats.Prefetches == 1, "one prefetch");
          Check(a.ReadState(0).SequenceEqual(before), "bit for bit after the spill");
          // The prefetch evicted b (then the least recently used); a call on it reloads it.
          Check(!b.Resident, "b was evicted for a");
          b.Step(0, x[0], x[1], x[2], x[3], x[4]);
          Check(b.Resident, "a call reloads");
          using (MemoryStats stats = engine.Stats()) Check(stats.Reloads == 1, "one reload");
        }
      }
    }
    Directory.Delete(dir, true);
  }

  static void BadCallsThrowWithTheLibraryMessage() {
    using (Engine engine = NewEngine(out Model model))
    using (model) {
      Session session = engine.NewSession();
      var q = new float[H * K]; var v = new float[HV * V];
      var missing = Throws<LumenException>(() => session.Step(0, q, q, v), "missing g and beta");
      Check(missing.Status == LumenStatus.INVALID_ARGUMENT, "status INVALID_ARGUMENT");
      Check(missing.StatusName == "LUMEN_ERROR_INVALID_ARGUMENT", "status name");
      Check(missing.Message.Contains("g"), "message names g: " + missing.Message);
      Check(session.Tokens(0) == 0, "the failed call changed nothing");
      var range = Throws<LumenException>(() => session.Tokens(7), "layer 7");
      Check(range.Status == LumenStatus.OUT_OF_RANGE && range.Message.Contains("7"), range.Message);
      var corrupt = Throws<LumenException>(() => session.Restore(new byte[] {1, 2, 3}), "corrupt");
      Check(corrupt.Status == LumenStatus.CORRUPT_SNAPSHOT, corrupt.Message);
      var io = Throws<LumenException>(() => session.Load("/nonexistent/dir/file.lumen"), "io");
      Check(io.Status == LumenStatus.IO, io.Message);
      session.Dispose();
      session.Dispose();
      Throws<ObjectDisposedException>(() => session.Tokens(0), "a disposed session");
    }
  }

  // fla's allow_neg_eigval: beta in [0, 2]. One token from a zero state with a unit key: the
  // state becomes beta k v^T, so o = beta (q . k) v.
  static void AllowNegEigvalTakesBetaUpToTwo() {
    var q = new float[] {1, 0, 0, 0}; var k = new float[] {1, 0, 0, 0};
    var v = new float[] {1, 2, 3, 4};
    Model model;
    using (var builder = new ModelBuilder())
    using (var doubled = Layer(LumenFamily.DELTA_NET, 1, 1, 4, 4))
    using (var plain = Layer(LumenFamily.DELTA_NET, 1, 1, 4, 4)) {
      doubled.Scale = plain.Scale = 1;
      doubled.AllowNegEigval = true;
      builder.AddLayer(doubled);
      builder.AddLayer(plain);
      model = builder.Build();
    }
    using (model)
    using (var options = new EngineOptions { NumThreads = 1 })
    using (var engine = new Engine(model, options))
    using (Session session = engine.NewSession()) {
      using (var built = model.LayerOptions(0)) Check(built.AllowNegEigval, "the option reads back");
      var o = session.Step(0, q, k, v, null, new float[] {1.5f});
      Check(o.SequenceEqual(new float[] {1.5f, 3, 4.5f, 6}), "o = 1.5 v");
      var twoAndAHalf = Throws<LumenException>(
          () => session.Step(0, q, k, v, null, new float[] {2.5f}), "beta 2.5");
      Check(twoAndAHalf.Message.Contains("must lie in [0, 2]"), twoAndAHalf.Message);
      var without = Throws<LumenException>(
          () => session.Step(1, q, k, v, null, new float[] {1.5f}), "beta 1.5 without the option");
      Check(without.Message.Contains("must lie in [0, 1]"), without.Message);
    }
  }

  // gated_delta_net, K = V = 1, A_log = dt_bias = 0, raw gates 0: the lower-bounded gate is
  // -2 * sigmoid(0) = -1, the raw gate -softplus(0) = -ln 2. A first token writes S = 1 (beta
  // 1); a second with beta 0 only decays it, so it reads exp(g).
  static void GateLowerBoundIsFlasLowerBoundedGate() {
    var one = new float[] {1}; var zero = new float[] {0};
    Model model;
    using (var builder = new ModelBuilder()) {
      foreach (float bound in new float[] {-2, 0}) {
        using (var layer = Layer(LumenFamily.GATED_DELTA_NET, 1, 1, 1, 1)) {
          layer.GateRaw = true;
          layer.GateLowerBound = bound;
          int index = builder.AddLayer(layer);
          builder.SetParam(index, LumenParam.A_LOG, zero);
          builder.SetParam(index, LumenParam.DT_BIAS, zero);
        }
      }
      model = builder.Build();
    }
    using (model)
    using (var options = new EngineOptions { NumThreads = 1 })
    using (var engine = new Engine(model, options))
    using (Session session = engine.NewSession()) {
      using (var built = model.LayerOptions(0)) Check(built.GateLowerBound == -2, "the bound reads back");
      for (int layer = 0; layer < 2; ++layer) {
        Check(session.Step(layer, one, one, one, zero, one)[0] == 1, "the first token writes S = 1");
        double read = session.Step(layer, one, one, one, zero, zero)[0];
        double expected = layer == 0 ? Math.Exp(-1) : 0.5;
        Check(Math.Abs(read - expected) <= 1e-6, "layer " + layer + " reads " + read);
      }
    }
  }

  // A gla layer, HV = 1, K = 2, V = 3, a convolution of width 3 (channels: H*K = 2 for q).
  static void StatesMoveInFlasLayout() {
    Model model;
    using (var builder = new ModelBuilder())
    using (var layer = Layer(LumenFamily.GLA, 1, 1, 2, 3)) {
      layer.ConvSize = 3;
      builder.AddLayer(layer);
      builder.SetParam(0, LumenParam.CONV_Q_WEIGHT, new float[6]);
      builder.SetParam(0, LumenParam.CONV_K_WEIGHT, new float[6]);
      builder.SetParam(0, LumenParam.CONV_V_WEIGHT, new float[9]);
      model = builder.Build();
    }
    using (model)
    using (var options = new EngineOptions { NumThreads = 1 })
    using (var engine = new Engine(model, options))
    using (Session session = engine.NewSession()) {
      Check(model.StateCount(0, LumenStatePart.CONV_Q, LumenStateLayout.FLA) == 6, "fla count");
      session.WriteState(0, new float[] {1, 2, 3, 4, 5, 6});  // [K, V]
      Check(session.ReadState(0, LumenStatePart.MATRIX, LumenStateLayout.FLA)
                .SequenceEqual(new float[] {1, 4, 2, 5, 3, 6}), "the matrix V-first");
      session.WriteState(0, new float[] {9, 1, 2, 9, 3, 4}, LumenStatePart.CONV_Q,
                         LumenStateLayout.FLA);
      Check(session.ReadState(0, LumenStatePart.CONV_Q).SequenceEqual(new float[] {1, 2, 3, 4}),
            "the window without fla's oldest column");
      Check(session.ReadState(0, LumenStatePart.CONV_Q, LumenStateLayout.FLA)
                .SequenceEqual(new float[] {0, 1, 2, 0, 3, 4}), "fla's window, oldest column 0");
      Throws<LumenException>(() => session.WriteState(0, new float[4], LumenStatePart.CONV_Q,
                                                      LumenStateLayout.FLA), "a W-1 window");
    }
  }

  static void ReservingScratchChecksItsArguments() {
    using (Engine engine = NewEngine(out Model model))
    using (model)
    using (var reservation = new Reservation { MaxSessions = 8, MaxTokens = 4096 }) {
      // The CPU backend holds no device scratch: a valid reservation changes nothing.
      engine.Reserve(reservation);
      Check(engine.ScratchBytes == 0, "no device scratch on the CPU");
      int[][] bad = {new[] {0, 1}, new[] {1, 0}, new[] {-3, 5}, new[] {(1 << 20) + 1, 1}};
      foreach (int[] counts in bad) {
        reservation.MaxSessions = counts[0];
        reservation.MaxTokens = counts[1];
        var error = Throws<LumenException>(() => engine.Reserve(reservation), "a bad reservation");
        Check(error.Status == LumenStatus.INVALID_ARGUMENT, error.Message);
        Check(error.Message.Contains("max_sessions"), error.Message);
      }
    }
  }

  static long ResidentBytes() =>
      long.Parse(File.ReadAllText("/proc/self/statm").Split(' ')[1]) * 4096;

  static void TextFieldsFreeTheirCopies() {
    // Each write of SpillDirectory copies 256 KiB: SWIG's default setter for a const char*
    // member never freed those copies, so 256 writes and 256 structs would keep 128 MiB.
    string text = new string('d', 1 << 18);
    using (var options = new EngineOptions { SpillDirectory = text }) {
      Check(options.SpillDirectory == text, "the text reads back");
      options.SpillDirectory = null;
      Check(options.SpillDirectory == null, "null reads back");
      Action cycles = () => {
        for (int i = 0; i < 256; ++i) {
          options.SpillDirectory = text;
          using (new EngineOptions { SpillDirectory = text }) {}  // Dispose frees its copy
        }
      };
      cycles();
      long before = ResidentBytes();
      cycles();
      long grown = ResidentBytes() - before;
      Check(grown < (32L << 20), "resident memory grew by " + grown + " bytes");
      Check(options.SpillDirectory == text, "the last text reads back");
    }
  }

  static void NativeMemoryIsReleased() {
    // 256 KiB of state per session: the 1,600 sessions of the two measured rounds would hold
    // 400 MiB if they leaked.
    Model big;
    using (var builder = new ModelBuilder())
    using (var layer = Layer(LumenFamily.RETENTION, 4, 4, 128, 128)) {
      builder.AddLayer(layer);
      big = builder.Build();
    }
    var oneThread = new EngineOptions { NumThreads = 1 };
    Action cycles = () => {
      for (int i = 0; i < 400; ++i) {
        using (var engine = new Engine(big, oneThread))
        using (Session s = engine.NewSession()) {
          Session fork = s.Fork();
          fork.Restore(s.Snapshot());
          if (i % 2 == 0) fork.Dispose();  // else: the finalizer frees it
        }
      }
      GC.Collect();
      GC.WaitForPendingFinalizers();
    };
    cycles();
    long before = ResidentBytes();
    cycles();
    cycles();
    long grown = ResidentBytes() - before;
    Check(grown < (64L << 20), "resident memory grew by " + grown + " bytes");
    big.Dispose();
    oneThread.Dispose();
  }

  // A model whose sessions hold 2 MiB of state each (retention, 32 heads of 128 x 128 fp32).
  static Engine TwoMebibyteSessions(out Model model) {
    using (var builder = new ModelBuilder())
    using (var layer = Layer(LumenFamily.RETENTION, 32, 32, 128, 128)) {
      builder.AddLayer(layer);
      model = builder.Build();
    }
    Check(model.StateBytes() == 2 << 20, "2 MiB of state per session");
    using (var options = new EngineOptions { NumThreads = 1 }) return new Engine(model, options);
  }

  static void DroppedSessionsStayWithinAMemoryBound() {
    // 3,000 sessions dropped undisposed would hold 6 GiB if nothing collected them; the
    // collector learns their bytes and frees them as they go.
    const long bound = 512L << 20;
    using (Engine engine = TwoMebibyteSessions(out Model model))
    using (model) {
      long before = ResidentBytes();
      for (int i = 1; i <= 3000; ++i) {
        engine.NewSession();
        if (i % 50 == 0) {
          long grown = ResidentBytes() - before;
          Check(grown < bound, "resident memory grew by " + (grown >> 20) + " MiB after " + i +
                               " dropped sessions of 2 MiB");
        }
      }
    }
  }

  static void DroppedSessionsCauseFullCollections() {
    using (Engine engine = TwoMebibyteSessions(out Model model))
    using (model) {
      int before = GC.CollectionCount(GC.MaxGeneration);
      for (int i = 0; i < 256; ++i) engine.NewSession().Fork();  // 1 GiB dropped
      int collections = GC.CollectionCount(GC.MaxGeneration) - before;
      Check(collections >= 2, collections + " full collections while 1 GiB of sessions was dropped");
    }
  }

  static void DisposeWaitsForACallInProgress() {
    // A prefill of about a quarter of a second on one thread, Dispose on another meanwhile: the
    // state must outlive the call, which then completes with the right output. (A Dispose that
    // comes before the call starts makes the call throw ObjectDisposedException instead.)
    const int tokens = 256, width = 32 * 128;
    var q = new float[tokens * width];
    var k = new float[tokens * width];
    var v = new float[tokens * width];
    for (int i = 0; i < q.Length; ++i) {
      q[i] = (float)Gaussian(); k[i] = (float)Gaussian() / 12; v[i] = (float)Gaussian();
    }
    using (Engine engine = TwoMebibyteSessions(out Model model))
    using (model)
    using (Session reference = engine.NewSession()) {
      float[] expected = reference.Prefill(0, q, k, v);
      int overlapped = 0;
      for (int round = 0; round < 10 && overlapped < 3; ++round) {
        Session session = engine.NewSession();
        float[] got = null;
        var started = new ManualResetEventSlim();
        var call = new Thread(() => {
          started.Set();
          try {
            got = session.Prefill(0, q, k, v);
          } catch (ObjectDisposedException) {
          }
        });
        call.Start();
        started.Wait();
        Thread.Sleep(20);
        session.Dispose();
        // A state freed now could be the next one allocated, and the call would write into it.
        using (Session next = engine.NewSession()) {
          call.Join();
          Check(next.ReadState(0).All(x => x == 0), "a new session's state stays zero");
        }
        Throws<ObjectDisposedException>(() => session.Tokens(0), "the session after the call");
        if (got == null) continue;
        ++overlapped;
        Check(got.SequenceEqual(expected), "the call that a Dispose overlapped");
      }
      Check(overlapped > 0, "a Dispose overlapped a call");
    }
  }

  static void EnumsAndFlagsNeedNoCasts() {
    using (var layer = new LayerOptions { Family = LumenFamily.KDA, QkL2norm = true,
                                          StateDtype = LumenDtype.BFLOAT16 }) {
      Check(layer.Family == LumenFamily.KDA && layer.QkL2norm && !layer.GateRaw, "layer options");
      Check(layer.StateDtype == LumenDtype.BFLOAT16, "state dtype");
    }
    Check(Capi.lumen_status_string(LumenStatus.OUT_OF_RANGE) == "LUMEN_ERROR_OUT_OF_RANGE",
          "status names");
    using (var builder = new ModelBuilder())
    using (var layer = Layer(LumenFamily.RETENTION, H, H, K, V))
    using (var options = new EngineOptions { Backend = LumenBackend.CPU, NumThreads = 1 }) {
      builder.AddLayer(layer);
      using (Model model = builder.Build())
      using (var engine = new Engine(model, options)) {
        Check(options.Backend == LumenBackend.CPU && engine.Backend == LumenBackend.CPU, "backend");
        Check(model.StateCount(0, LumenStatePart.NORMALIZER) == 0, "state part");
      }
    }
  }

  static string PascalCase(string snake) =>
      string.Concat(snake.Split('_').Select(w => char.ToUpperInvariant(w[0]) + w.Substring(1)));

  static void PresetsAreLayerOptionsFactories() {
    var names = Regex.Matches(File.ReadAllText(header), @"\blumen_layer_options_init_(\w+)\s*\(")
                    .Cast<Match>().Select(m => m.Groups[1].Value).ToList();
    Check(names.Count >= 3, "the header's presets were found");
    foreach (string name in names) {
      MethodInfo factory = typeof(LayerOptions).GetMethod(PascalCase(name), Type.EmptyTypes);
      Check(factory != null && factory.IsStatic, "LayerOptions." + PascalCase(name) + "()");
      using (var expected = new LayerOptions())
      using (var preset = (LayerOptions)factory.Invoke(null, null))
      using (var builder = new ModelBuilder()) {
        typeof(Capi).GetMethod("lumen_layer_options_init_" + name).Invoke(null, new object[] {expected});
        foreach (PropertyInfo field in typeof(LayerOptions).GetProperties()) {
          Check(Equals(field.GetValue(preset), field.GetValue(expected)), name + " " + field.Name);
        }
        Check(preset.NumHeads > 0 && preset.KeyDim > 0, name + " has dims");
        Check(builder.AddLayer(preset) == 0, name + " is a valid layer");
      }
    }
  }

  static void SpansMatchArrays() {
    const int tokens = 5;
    float[][] x = Inputs(tokens);
    using (Engine engine = NewEngine(out Model model))
    using (model) {
      Session[] s = Enumerable.Range(0, 8).Select(_ => engine.NewSession()).ToArray();
      // Inputs as slices of one buffer, the output on the stack.
      float[] packed = x.SelectMany(a => a).ToArray();
      int[] offsets = {0, x[0].Length, x[0].Length + x[1].Length, 0, 0};
      offsets[3] = offsets[2] + x[2].Length;
      offsets[4] = offsets[3] + x[3].Length;
      Span<float> o = stackalloc float[HV * V];
      float[] expected = s[0].Step(0, Token(x[0], 0, H * K), Token(x[1], 0, H * K),
                                   Token(x[2], 0, HV * V), Token(x[3], 0, HV), Token(x[4], 0, HV));
      s[1].Step(0, packed.AsSpan(offsets[0], H * K), packed.AsSpan(offsets[1], H * K),
                packed.AsSpan(offsets[2], HV * V), packed.AsSpan(offsets[3], HV),
                packed.AsSpan(offsets[4], HV), o);
      Check(o.ToArray().SequenceEqual(expected), "step from spans");
      // A layer without g and beta takes empty spans.
      float[] retention = s[0].Step(1, Token(x[0], 0, H * K), Token(x[1], 0, H * K),
                                    Token(x[2], 0, H * V));
      Span<float> o1 = stackalloc float[H * V];
      s[1].Step(1, packed.AsSpan(offsets[0], H * K), packed.AsSpan(offsets[1], H * K),
                new ReadOnlySpan<float>(x[2], 0, H * V), default, default, o1);
      Check(o1.ToArray().SequenceEqual(retention), "empty spans are absent tensors");

      float[] prefilled = s[2].Prefill(0, x[0], x[1], x[2], x[3], x[4]);
      var fromSpans = new float[prefilled.Length];
      s[3].Prefill(0, x[0].AsSpan(), x[1], x[2], x[3], x[4], fromSpans);
      Check(fromSpans.SequenceEqual(prefilled), "prefill from spans");

      float[] batched = engine.StepBatch(0, new[] {s[4], s[5]}, x[0].Take(2 * H * K).ToArray(),
                                         x[1].Take(2 * H * K).ToArray(), x[2].Take(2 * HV * V).ToArray(),
                                         x[3].Take(2 * HV).ToArray(), x[4].Take(2 * HV).ToArray());
      var batchedSpans = new float[batched.Length];
      engine.StepBatch(0, new[] {s[6], s[7]}, x[0].AsSpan(0, 2 * H * K), x[1].AsSpan(0, 2 * H * K),
                       x[2].AsSpan(0, 2 * HV * V), x[3].AsSpan(0, 2 * HV), x[4].AsSpan(0, 2 * HV),
                       batchedSpans);
      Check(batchedSpans.SequenceEqual(batched), "step batch from spans");

      // bf16 bits: spans give what ushort[] arrays give, into fp32 and into bf16 outputs.
      ushort[][] bits = x.Select(a => a.Select(f => (ushort)(BitConverter.ToUInt32(
          BitConverter.GetBytes(f), 0) >> 16)).ToArray()).ToArray();
      foreach (Session session in s) session.Reset();
      var arrays = new float[tokens * HV * V];
      s[0].Prefill(0, tokens, new Inputs(bits[0], bits[1], bits[2], bits[3], bits[4]) {
                     Dtype = LumenDtype.BFLOAT16 }, arrays);
      var spans = new float[arrays.Length];
      s[1].Prefill(0, LumenDtype.BFLOAT16, bits[0], bits[1], bits[2], bits[3], bits[4], spans);
      Check(spans.SequenceEqual(arrays), "bf16 prefill from spans");
      var arrays16 = new ushort[HV * V];
      var spans16 = new ushort[HV * V];
      ushort[][] first = bits.Select((a, i) => a.Take(a.Length / tokens).ToArray()).ToArray();
      s[2].Step(0, new Inputs(first[0], first[1], first[2], first[3], first[4]) {
                  Dtype = LumenDtype.BFLOAT16 }, arrays16, LumenDtype.BFLOAT16);
      s[3].Step(0, LumenDtype.BFLOAT16, first[0], first[1], first[2], first[3], first[4], spans16);
      Check(spans16.SequenceEqual(arrays16) && arrays16.Any(b => b != 0), "bf16 step into bf16");
      var wrong = Throws<LumenException>(() => s[4].Step(0, x[0].AsSpan(0, 3), x[1], x[2], x[3], x[4],
                                                          new float[HV * V]), "a short q span");
      Check(wrong.Status == LumenStatus.INVALID_ARGUMENT, wrong.Message);
      foreach (Session session in s) session.Dispose();
    }
  }

  static float[] StepPlainly(Session session, float[][] x, int first, int count) {
    var o = new float[count * HV * V];
    for (int t = first; t < first + count; ++t) {
      float[] one = session.Step(0, Token(x[0], t, H * K), Token(x[1], t, H * K),
                                 Token(x[2], t, HV * V), Token(x[3], t, HV), Token(x[4], t, HV));
      Array.Copy(one, 0, o, (t - first) * HV * V, HV * V);
    }
    return o;
  }

  static void TentativeThenCommitEqualsPlainSteps() {
    float[][] x = Inputs(6);
    using (Engine engine = NewEngine(out Model model))
    using (model)
    using (Session tentative = engine.NewSession())
    using (Session all = engine.NewSession())
    using (Session plain = engine.NewSession()) {
      float[] o = tentative.StepTentative(0, Token(x[0], 0, 4 * H * K), Token(x[1], 0, 4 * H * K),
                                          Token(x[2], 0, 4 * HV * V), Token(x[3], 0, 4 * HV),
                                          Token(x[4], 0, 4 * HV));
      Check(tentative.TentativeTokens == 4, "tentative count");
      Check(o.SequenceEqual(StepPlainly(all, x, 0, 4)), "tentative outputs are the steps' bits");
      var busy = Throws<LumenException>(() => tentative.ReadState(0), "read while tentative");
      Check(busy.Status == LumenStatus.UNCOMMITTED_TOKENS, busy.Message);
      tentative.Commit(2);
      StepPlainly(plain, x, 0, 2);
      Check(tentative.Tokens(0) == 2, "committed token count");
      Check(tentative.ReadState(0).SequenceEqual(plain.ReadState(0)), "committed state");
      Check(Session.MaxTentativeTokens == 16, "MaxTentativeTokens");

      Session[] pair = { engine.NewSession(), engine.NewSession() };
      int[] cuSeqlens = { 0, 2, 6 };
      int[] accepted = { 2, 1 };
      engine.StepTentativeBatch(0, pair, cuSeqlens, x[0], x[1], x[2], x[3], x[4]);
      engine.CommitBatch(pair, accepted);
      for (int i = 0; i < 2; ++i) {
        using (Session single = engine.NewSession()) {
          StepPlainly(single, x, cuSeqlens[i], accepted[i]);
          Check(pair[i].ReadState(0).SequenceEqual(single.ReadState(0)), "batched commit " + i);
        }
        pair[i].Dispose();
      }
    }
  }

  static void RewindGoesBackBitwise() {
    float[][] x = Inputs(5);
    Model model;
    using (var builder = new ModelBuilder())  // one layer: every layer steps and keeps history
    using (var gated = Layer(LumenFamily.GATED_DELTA_NET, H, HV, K, V)) {
      builder.AddLayer(gated);
      model = builder.Build();
    }
    using (model)
    using (var options = new EngineOptions { NumThreads = 2 })
    using (var engine = new Engine(model, options))
    using (Session session = engine.NewSession()) {
      session.SetRewindDepth(3);
      var states = new List<float[]> { session.ReadState(0) };
      for (int t = 0; t < 5; ++t) {
        StepPlainly(session, x, t, 1);
        states.Add(session.ReadState(0));
      }
      Check(session.RewindAvailable == 3, "rewind available");
      session.Rewind(2);
      Check(session.Tokens(0) == 3, "token count after rewind");
      Check(session.ReadState(0).SequenceEqual(states[3]), "state after rewind");
      Throws<LumenException>(() => session.Rewind(Session.MaxRewindTokens), "too far back");
    }
  }

  public static int Main(string[] args) {
    header = args[0];
    scratch = args[1];
    var tests = new Action[] {
      EveryHeaderFunctionIsReachable, StepAndPrefillMatchTheReference, PointersAndBf16Inputs,
      BatchedStepAndVarlenPrefillMatchSingleSessions, SnapshotRoundTripsThroughBytesAndAFile,
      StoresSaveAndLoadByKeyWithVersions, SessionsBeyondTheBudgetSpillAndComeBackBitForBit,
      BadCallsThrowWithTheLibraryMessage, AllowNegEigvalTakesBetaUpToTwo,
      GateLowerBoundIsFlasLowerBoundedGate, StatesMoveInFlasLayout,
      ReservingScratchChecksItsArguments,
      TextFieldsFreeTheirCopies, NativeMemoryIsReleased, DroppedSessionsStayWithinAMemoryBound,
      DroppedSessionsCauseFullCollections, DisposeWaitsForACallInProgress,
      EnumsAndFlagsNeedNoCasts, PresetsAreLayerOptionsFactories, SpansMatchArrays,
      TentativeThenCommitEqualsPlainSteps, RewindGoesBackBitwise,
    };
    int failed = 0;
    foreach (Action test in tests) {
      var watch = System.Diagnostics.Stopwatch.StartNew();
      try {
        test();
        Console.WriteLine("ok    {0} ({1:F1} s)", test.Method.Name, watch.Elapsed.TotalSeconds);
      } catch (Exception e) {
        ++failed;
        Console.WriteLine("FAIL  " + test.Method.Name + ": " + e);
      }
    }
    Console.WriteLine("{0} of {1} tests passed", tests.Length - failed, tests.Length);
    return failed == 0 ? 0 : 1;
  }
}
