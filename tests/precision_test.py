"""Mixed precision (`model.dtype`): bf16 compute; f32 parameters, logits and positional terms.

One tiny one-layer model per (architecture, scheme), built once and shared by the
tests (`_models`); every stack runs over the same 6 slots, so most eager-compiled
ops are shared too.

Tolerances. bfloat16 keeps 8 significant bits (rounding error up to 2^-9 ≈ 0.2%
relative), and a forward pass rounds each activation and matmul input a dozen or
so times: bf16 logits differ from the f32 logits of the same parameters by up to
1.5% of the largest |logit| on these models (measured: 0.6-1.5% by scheme).
`BF16_VS_F32` allows 4%. Whether positional terms really stay float32 is tested
hook by hook, against f32 inputs of the same values (a term rounded to bf16 would
hide inside that 4%).
Cached decoding in bf16 rounds the same values as the full pass; its matmuls
have other shapes (one query at a time), so on a backend whose f32 accumulation
order depends on the shape a value may move by one bf16 step: `CACHED_BF16`
allows 1% of the largest |logit| (on XLA:CPU the two were bit-identical; the f32
parity tests in model_test.py use 1e-5), and greedy choices must agree wherever
the top two logits are more than twice that apart.
"""

import functools
import os
import re

import jax
import jax.numpy as jnp
import numpy as np

import pytest

from relpos_jax import architectures
from relpos_jax import decode
from relpos_jax import dots
from relpos_jax import model as model_lib
from relpos_jax import optim
from relpos_jax import positions
from relpos_jax import precision
from relpos_jax import provenance
from relpos_jax import train_lib
from relpos_jax.data import vocab
from relpos_jax.positions import base
from relpos_jax.positions import randomized

from benchmarks import dots as bench_dots
import cli_harness  # forks the process with two devices
import model_harness  # its quick-loop scheme subset (pytest puts tests/ on the path)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCHEMES = sorted(positions.SCHEMES)
# One scheme per hook (the first registered that implements it), for the costlier cached test.
HOOK_SCHEMES = sorted({next(n for n in SCHEMES if positions.SCHEMES[n].implements(hook))
                       for hook in base.EMBED_HOOKS + base.ATTENTION_HOOKS})
ARCHS = ["encoder_decoder", "decoder_only"]
V, B = 13, 2
# Source and target lengths. Each distinct shape compiles its own eager ops, so
# every stack runs over 6 slots: the encoder-decoder's 6 + 6, the decoder-only's 3 + 3.
LENGTHS = {"encoder_decoder": (6, 6), "decoder_only": (3, 3)}
BF16_VS_F32 = 0.04  # of the largest |f32 logit|
CACHED_BF16 = 0.01  # of the largest |logit|


def _config(arch, name, dtype="float32"):
  config = architectures.default_config(arch)
  config.update(d_model=16, num_heads=2, head_dim=8, d_ff=32, dtype=dtype)
  if arch == "encoder_decoder":
    config.update(num_encoder_layers=1, num_decoder_layers=1)
  else:
    config.update(num_layers=1)
  config.position = positions.default_config(name)
  return config


def _batch(arch):
  S, T = LENGTHS[arch]
  rng = np.random.default_rng(0)
  inputs = rng.integers(4, V, (B, S))
  inputs[1, -2:] = vocab.PAD_ID  # a shorter row
  targets = rng.integers(4, V, (B, T))
  targets[:, -1] = vocab.EOS_ID
  return jnp.asarray(inputs, jnp.int32), jnp.asarray(targets, jnp.int32)


@functools.lru_cache(maxsize=None)
def _models(arch, name):
  """`(f32 model, bf16 model, float32 params, bf16 logits)`, built once per test session.

  The parameters are N(0, 0.5) draws of the init's shapes rather than the init
  itself: cheaper (no initializer is compiled), and the position parameters (T5's,
  Shaw's and XL's tables start at std 0.02) weigh in the logits as much as the rest.
  """
  inputs, targets = _batch(arch)
  m32 = architectures.make_model(_config(arch, name), vocab_size=V)
  m16 = architectures.make_model(_config(arch, name, "bfloat16"), vocab_size=V)
  shapes = jax.eval_shape(lambda: m32.init(jax.random.PRNGKey(0), inputs, targets)["params"])
  rng = np.random.default_rng(0)
  params = jax.tree_util.tree_map(
      lambda s: jnp.asarray(rng.normal(0.0, 0.5, s.shape), jnp.float32), shapes)
  return m32, m16, params, m16.apply({"params": params}, inputs, targets)


def _float_dtypes(tree):
  return {jnp.dtype(x.dtype) for x in jax.tree_util.tree_leaves(tree)
          if jnp.issubdtype(x.dtype, jnp.floating)}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", model_harness.quick_params(SCHEMES))
def test_bf16_logits_are_close_to_f32_for_every_scheme(arch, name):
  inputs, targets = _batch(arch)
  m32, _, params, logits16 = _models(arch, name)
  logits32 = m32.apply({"params": params}, inputs, targets)
  assert logits16.dtype == jnp.float32, name  # the loss sees float32 logits
  scale = float(np.abs(logits32).max())
  err = float(np.abs(np.asarray(logits16) - np.asarray(logits32)).max())
  assert 0 < err, f"{name}: the bf16 model computed in float32"
  np.testing.assert_allclose(logits16, logits32, rtol=0, atol=BF16_VS_F32 * scale,
                             err_msg=f"{arch}/{name}")


@pytest.mark.parametrize("name", SCHEMES)
def test_positional_terms_are_float32_from_bf16_activations(name):
  """Each hook gives from bf16 inputs what f32 gives from the same values (up to its rounding)."""
  H, E, D, Q, K = 2, 8, 16, 6, 6  # the models' sizes (shared eager-compiled ops)
  scheme = positions.make_scheme(positions.default_config(name), num_heads=H, head_dim=E,
                                 d_model=D, causal=False)
  rng = np.random.default_rng(1)
  bf16 = lambda *shape: jnp.asarray(rng.normal(size=shape), jnp.bfloat16)
  q, k, x_emb, x_rot = bf16(B, Q, H, E), bf16(B, K, H, E), bf16(B, Q, D), bf16(B, Q, H, E)
  w = jax.nn.softmax(bf16(B, H, Q, K).astype(jnp.float32), axis=-1).astype(jnp.bfloat16)
  # Large positions (up to a learned table's last row): where bf16 angles would be wrong.
  qpos = jnp.asarray(np.sort(rng.choice(500, (B, Q), replace=False), axis=1), jnp.int32)
  kpos = jnp.asarray(np.sort(rng.choice(500, (B, K), replace=False), axis=1), jnp.int32)
  f32 = lambda a: a.astype(jnp.float32)
  params = scheme.init(jax.random.PRNGKey(0), q, k, qpos, kpos, method="logit_bias")
  hook = lambda method, *args: scheme.apply(params, *args, method=method)
  for method, args16, args32 in [("logit_bias", (q, k, qpos, kpos), (f32(q), f32(k), qpos, kpos)),
                                 ("value_term", (w, qpos, kpos), (f32(w), qpos, kpos))]:
    got, want = hook(method, *args16), hook(method, *args32)
    if want is not None:
      assert got.dtype == jnp.float32, method
      np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=method)
  for method, x, pos in [("embed", x_emb, qpos), ("rotate", x_rot, qpos)]:
    got = hook(method, x, pos)
    assert got.dtype == jnp.bfloat16, method
    np.testing.assert_array_equal(f32(got), f32(hook(method, f32(x), pos).astype(jnp.bfloat16)),
                                  err_msg=method)


@pytest.mark.parametrize("arch", ARCHS)
def test_params_and_optimizer_state_stay_float32_in_bf16(arch):
  """The trainer's own init and step, traced abstractly (dtypes only, nothing compiled)."""
  m16 = architectures.make_model(_config(arch, "t5", "bfloat16"), vocab_size=V)
  tx, schedule = optim.make_optimizer(num_steps=10)
  inputs, targets = _batch(arch)
  batch = {"inputs": inputs, "targets": targets}
  state = jax.eval_shape(lambda: train_lib.init_state(m16, tx, 0, batch))
  f32 = {jnp.dtype(jnp.float32)}
  assert _float_dtypes(state.params) == _float_dtypes(state.opt_state) == f32
  step = train_lib.make_train_step(m16, tx, schedule, label_smoothing=0.0,
                                   randomized=randomized.RandomizedPositions())
  state, metrics = jax.eval_shape(step, state, batch, jnp.int32(0))
  assert _float_dtypes(state.params) == _float_dtypes(state.opt_state) == f32
  assert metrics["loss"].dtype == metrics["grad_norm"].dtype == jnp.float32


@pytest.mark.parametrize("arch", ARCHS)
def test_untied_output_logits_are_float32_in_bf16(arch):
  config = _config(arch, "t5", "bfloat16")
  config.share_embeddings = False
  model = architectures.make_model(config, vocab_size=V)
  inputs, targets = _batch(arch)
  logits = jax.eval_shape(lambda: model.init_with_output(jax.random.PRNGKey(0), inputs,
                                                         targets)[0])
  assert logits.dtype == jnp.float32


def _cached_logits(model, params, inputs, targets):
  """Teacher-forced logits through the decoding protocol: `prime`, then a cached step per token."""
  cache = decode.init_cache(model, inputs, targets.shape[1])
  (logits, context, start), new_vars = model.apply(
      {"params": params, "cache": cache}, inputs, None, None, mutable=["cache"],
      method=model.prime)
  cache, out = new_vars["cache"], [logits]
  for t in range(1, targets.shape[1]):
    logits, new_vars = model.apply({"params": params, "cache": cache}, targets[:, t - 1],
                                   start + t, context, inputs, mutable=["cache"],
                                   method=model.step)
    cache, out = new_vars["cache"], out + [logits]
  return jnp.stack(out, axis=1), cache


@pytest.mark.parametrize("arch", ARCHS)
def test_bf16_cached_decoding_matches_the_full_forward(arch):
  inputs, targets = _batch(arch)
  for name in HOOK_SCHEMES:
    _, m16, params, full = _models(arch, name)
    cached, cache = _cached_logits(m16, params, inputs, targets)
    kv_dtypes = {leaf.dtype for path, leaf in jax.tree_util.tree_leaves_with_path(cache)
                 if "cached_key" in jax.tree_util.keystr(path)
                 or "cached_value" in jax.tree_util.keystr(path)}
    assert kv_dtypes == {jnp.dtype(jnp.bfloat16)}, name  # the cache holds the compute dtype
    assert cached.dtype == jnp.float32, name
    atol = CACHED_BF16 * float(np.abs(full).max())
    np.testing.assert_allclose(cached, full, rtol=0, atol=atol, err_msg=f"{arch}/{name}")
    # Greedy choices agree wherever the full pass is not within the tolerance of a tie.
    top2_BxTx2 = np.sort(np.asarray(full), axis=-1)[..., -2:]
    clear_BxT = top2_BxTx2[..., 1] - top2_BxTx2[..., 0] > 2 * atol
    assert clear_BxT.mean() >= 0.5, name
    np.testing.assert_array_equal(np.asarray(cached.argmax(-1))[clear_BxT],
                                  np.asarray(full.argmax(-1))[clear_BxT], err_msg=f"{arch}/{name}")


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", ["float16", "bf16", "fp32"])
def test_an_unknown_dtype_names_the_config_key(arch, dtype):
  with pytest.raises(ValueError, match=r"unknown dtype .* \(config key model\.dtype\); "
                                       r"choose one of: float32, bfloat16, auto"):
    architectures.make_model(_config(arch, "t5", dtype), vocab_size=V)


# ------------------------------------------------ the dot helper (relpos_jax/dots.py)

EINSUMS = [  # (spec, lhs shape, rhs shape): every form the model uses, plus a swapped one
    ("bld,dhe->blhe", (2, 3, 4), (4, 2, 5)),      # q/k/v projection
    ("blhe,hed->bld", (2, 3, 2, 5), (2, 5, 4)),   # output projection
    ("bhqk,bhsk->bhqs", (2, 2, 3, 5), (2, 2, 4, 5)),  # attention logits
    ("bhqs,bhsk->bhqk", (2, 2, 3, 4), (2, 2, 4, 5)),  # weighted values
    ("...d,vd->...v", (2, 3, 4), (7, 4)),         # tied output logits
    ("md,df->fm", (3, 4), (4, 6)),                # an output order only a swap gives
    ("mf,fd->md", (12, 8), (8, 3)),               # a narrowing layer (MLP out): its weight
                                                  # gradient transposes dy, not the activations
]


def _rounded(rng, shape):
  """A float32 array holding bf16-representable values (so f32 and bf16 see the same inputs)."""
  return jnp.asarray(rng.normal(size=shape), jnp.bfloat16).astype(jnp.float32)


@pytest.mark.parametrize("spec,a_shape,b_shape", EINSUMS)
def test_float32_dots_are_jnp_einsum_bit_for_bit(spec, a_shape, b_shape):
  rng = np.random.default_rng(0)
  a, b = jnp.asarray(rng.normal(size=a_shape)), jnp.asarray(rng.normal(size=b_shape))
  got = dots.einsum(spec, a, b, jnp.float32)
  np.testing.assert_array_equal(got, jnp.einsum(spec, a, b, preferred_element_type=jnp.float32))
  assert dots.dense_kwargs(jnp.float32) == {}  # Flax's own dot_general, unchanged


@pytest.mark.parametrize("spec,a_shape,b_shape", EINSUMS)
def test_bf16_einsum_values_and_float32_gradients(spec, a_shape, b_shape):
  """Forward: f32 accumulation of bf16 inputs; gradients: the f32 ones up to bf16 rounding."""
  rng = np.random.default_rng(1)
  a, b = _rounded(rng, a_shape), _rounded(rng, b_shape)
  got = dots.einsum(spec, a.astype(jnp.bfloat16), b, jnp.bfloat16)
  assert got.dtype == jnp.float32
  np.testing.assert_allclose(got, jnp.einsum(spec, a, b), rtol=1e-5, atol=1e-5)
  c = jnp.asarray(rng.normal(size=got.shape), jnp.float32)
  loss16 = lambda a, b: jnp.sum(dots.bf16_einsum(spec, a, b) * c)
  loss32 = lambda a, b: jnp.sum(jnp.einsum(spec, a, b) * c)
  (da16, db16), (da32, db32) = jax.grad(loss16, (0, 1))(a, b), jax.grad(loss32, (0, 1))(a, b)
  assert da16.dtype == db16.dtype == jnp.float32  # a float32 weight gets a float32 gradient
  for g16, g32 in ((da16, da32), (db16, db32)):
    scale = float(np.abs(g32).max())
    np.testing.assert_allclose(g16, g32, rtol=0, atol=0.02 * scale, err_msg=spec)
    assert float(np.abs(np.asarray(g16) - np.asarray(g32)).max()) > 0  # really bf16 cotangents


def test_weight_gradient_copies_the_smaller_operand():
  """dW = xᵀ·dy of a d_ff -> d_model layer: row-major copies of dy and dW, never of x [M, F]."""
  x, w = jnp.ones((96, 32), jnp.bfloat16), jnp.ones((32, 8), jnp.float32)
  grad = jax.grad(lambda x, w: jnp.sum(dots.bf16_einsum("mf,fd->md", x, w)), argnums=1)
  copied = re.findall(r"reverse %\S+, dims = \[\d+\] : tensor<([\dx]+)x\w+>",
                      jax.jit(grad).lower(x, w).as_text())
  assert copied and "96x32" not in copied and "32x96" not in copied, copied
  assert {"96x8", "8x32"} <= set(copied), copied  # dy [M, D] and the small result dWᵀ


def test_row_major_transpose_is_a_transpose():
  x = jnp.arange(2 * 3 * 1 * 4, dtype=jnp.bfloat16).reshape(2, 3, 1, 4)
  for perm in [(0, 2, 1, 3), (3, 2, 1, 0), (0, 1, 3, 2), (0, 1, 2, 3)]:
    np.testing.assert_array_equal(dots.row_major_transpose(x, perm), jnp.transpose(x, perm))


def _train_step(arch, vmapped):
  """One jitted bf16 T5 train step of a tiny model (vmapped over one seed or not); its metrics."""
  m16 = architectures.make_model(_config(arch, "t5", "bfloat16"), vocab_size=V)
  tx, schedule = optim.make_optimizer(num_steps=10)
  inputs, targets = _batch(arch)
  batch = {"inputs": inputs, "targets": targets}
  state = train_lib.init_state(m16, tx, 0, batch)
  step = train_lib.make_train_step(m16, tx, schedule, label_smoothing=0.0,
                                   randomized=randomized.RandomizedPositions())
  if vmapped:
    add = lambda x: x[None]
    step, state, batch, seed = (jax.vmap(step), jax.tree_util.tree_map(add, state),
                                jax.tree_util.tree_map(add, batch), jnp.zeros((1,), jnp.int32))
  else:
    seed = jnp.int32(0)
  compiled = jax.jit(step).lower(state, batch, seed).compile()
  return compiled(state, batch, seed)[1], compiled.as_text()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("vmapped", [False, True])
def test_bf16_train_step_runs_with_every_dot_in_bf16(arch, vmapped):
  """The reverted attempt failed here un-vmapped (DotThunk BF16 x BF16 = F32)."""
  metrics, hlo = _train_step(arch, vmapped)
  assert np.isfinite(np.asarray(metrics["loss"])).all()
  counts = bench_dots.count_dots(hlo)
  assert counts.get("converted", 0) == 0, counts  # T5's bias is added, no positional dot
  assert set(counts) == {"bf16 x bf16"}, counts


@pytest.mark.slow  # a subprocess with two host devices
def test_bf16_train_step_runs_on_the_data_parallel_mesh(tmp_path):
  script = tmp_path / "mesh.py"
  script.write_text(
      f"import sys; sys.path.insert(0, {REPO!r})  # this checkout's relpos_jax\n"
      "import jax, jax.numpy as jnp, numpy as np\n"
      "from relpos_jax import architectures, optim, train_lib\n"
      "from relpos_jax.positions import randomized\n"
      "assert jax.device_count() == 2\n"
      "for arch in ('encoder_decoder', 'decoder_only'):\n"
      "  c = architectures.default_config(arch)\n"
      "  c.update(d_model=16, num_heads=2, head_dim=8, d_ff=32, dtype='bfloat16')\n"
      "  m = architectures.make_model(c, vocab_size=13)\n"
      "  tx, sched = optim.make_optimizer(num_steps=10)\n"
      "  rng = np.random.default_rng(0)\n"
      "  batch = {'inputs': rng.integers(3, 13, (1, 4, 7)).astype(np.int32),\n"
      "           'targets': rng.integers(3, 13, (1, 4, 5)).astype(np.int32)}\n"
      "  mesh = train_lib.make_mesh()\n"
      "  rep = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())\n"
      "  rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(None, 'data'))\n"
      "  state = jax.device_put(train_lib.init_replicas(m, tx, [0]), rep)\n"
      "  step = train_lib.make_train_step(m, tx, sched, label_smoothing=0.0,\n"
      "                                   randomized=randomized.RandomizedPositions())\n"
      "  f = jax.jit(jax.vmap(step), out_shardings=(rep, rep))\n"
      "  _, metrics = f(state, jax.device_put(batch, rows), jnp.zeros((1,), jnp.int32))\n"
      "  assert np.isfinite(float(metrics['loss'][0])), arch\n"
      "print('mesh ok')\n")
  # The suite's compile options (conftest.py) with two host devices, as train_main_test's
  # eight-device run; read when jax starts, so cli_harness forks it (a process of its own,
  # without the import).
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=os.environ.get("XLA_FLAGS", "")
             + " --xla_force_host_platform_device_count=2")
  result = cli_harness.run([script], env=env, cwd=REPO, timeout=600)
  assert result.returncode == 0 and "mesh ok" in result.stdout, result.stderr[-2000:]


# ------------------------------------------------ model.dtype = "auto" (relpos_jax/precision.py)

@pytest.fixture
def fresh_auto():
  """Clears the once-per-process `auto` choice before and after the test."""
  precision._auto.cache_clear()
  precision._log_auto.cache_clear()
  yield
  precision._auto.cache_clear()
  precision._log_auto.cache_clear()


@pytest.mark.parametrize("fast,want", [(False, jnp.float32), (True, jnp.bfloat16)])
def test_auto_follows_the_capability_check(monkeypatch, fresh_auto, fast, want):
  monkeypatch.setattr(precision, "bf16_dots_fast", lambda: (fast, "forced by the test"))
  assert model_lib.compute_dtype("auto") == want
  assert precision.record() == {"auto": jnp.dtype(want).name, "reason": "forced by the test"}
  assert provenance.provenance()["precision"]["auto"] == jnp.dtype(want).name
  model = architectures.make_model(_config("decoder_only", "t5", "auto"), vocab_size=V)
  inputs, targets = _batch("decoder_only")
  cache = jax.eval_shape(lambda: decode.init_cache(model, inputs, targets.shape[1]))
  kv = {leaf.dtype for path, leaf in jax.tree_util.tree_leaves_with_path(cache)
        if "cached_key" in jax.tree_util.keystr(path)}
  assert kv == {jnp.dtype(want)}  # the model really computes in the chosen dtype


def test_auto_is_logged_where_resolved_not_where_recorded(monkeypatch, fresh_auto):
  monkeypatch.setattr(precision, "bf16_dots_fast", lambda: (False, "forced by the test"))
  logged = []
  monkeypatch.setattr(precision.logging, "info", lambda msg, *args: logged.append(msg % args))
  precision.record()  # every run record reads it, a bf16 run's too: no "auto means" line
  assert logged == []
  assert precision.resolve("bfloat16") == "bfloat16" and logged == []
  assert precision.resolve("auto") == precision.resolve("auto") == "float32"
  assert logged == ["model.dtype 'auto' means float32 on this machine: forced by the test"]


@pytest.mark.parametrize("fast", [False, True])
def test_named_bf16_warns_once_only_where_it_is_slow(monkeypatch, fast):
  monkeypatch.setattr(precision, "bf16_dots_fast", lambda: (fast, "forced by the test"))
  precision._warn_named_bf16.cache_clear()
  try:
    assert model_lib.compute_dtype("bfloat16") == jnp.bfloat16  # kept as configured
    warning = precision._warn_named_bf16()
    if fast:
      assert warning is None
    else:
      assert "forced by the test" in warning and "more slowly than float32" in warning
    assert model_lib.compute_dtype("float32") == jnp.float32
  finally:
    precision._warn_named_bf16.cache_clear()


def test_bf16_is_fast_only_with_amx_or_an_accelerator():
  avx512 = frozenset({"avx512f", "avx512_bf16"})
  assert not precision.bf16_dots_fast("cpu", avx512)[0]
  assert "amx_bf16" in precision.bf16_dots_fast("cpu", avx512)[1]
  assert not precision.bf16_dots_fast("cpu", avx512 | {"amx_tile"})[0]
  assert precision.bf16_dots_fast("cpu", avx512 | {"amx_tile", "amx_bf16"})[0]
  assert precision.bf16_dots_fast("gpu", frozenset())[0]
  assert precision.bf16_dots_fast("tpu", frozenset())[0]


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
  path = tmp_path / "cpuinfo"
  path.write_text("processor\t: 0\nflags\t\t: fpu sse2 amx_bf16 amx_tile\n\nprocessor\t: 1\n")
  assert precision.cpu_flags(str(path)) == {"fpu", "sse2", "amx_bf16", "amx_tile"}
  assert precision.cpu_flags(str(tmp_path / "missing")) == frozenset()
