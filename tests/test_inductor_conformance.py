"""tools/inductor_conformance.py (and its conformance_*.py modules): its
classification of failures, its reading of worker event logs, and (on a
small synthetic test file, no PyTorch sources needed) its handling of
crashing and hanging tests."""

from __future__ import annotations

import json
import pathlib
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

sys.path.insert(0, str(ROOT / "tools"))  # the runner's modules import each other by name
try:
    import conformance_classify as cc
    import conformance_plugin as cp
    import conformance_runner as cr
    import inductor_conformance as ic
finally:
    sys.path.remove(str(ROOT / "tools"))


def _tb(test_body: str, failing: str, error: str, where: str = "test_torchinductor.py:1234: ") -> str:
    """A pytest long-style traceback of a CommonTemplate test."""
    body = textwrap.indent(textwrap.dedent(test_body).strip("\n"), "    ")
    err = "\n".join("E       " + ln for ln in error.splitlines())
    return (
        "self = <test_torchinductor.CpuTests testMethod=test_x_cpu>\n"
        "value = <function CommonTemplate.test_x at 0x7f00>\n\n"
        "    @functools.wraps(value)\n"
        "    def new_test(self, value=value):\n"
        ">       return value(self)\n\n"
        "test_torchinductor.py:12875: \n"
        "_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ \n\n"
        f"{body}\n>       {failing}\n{err}\n\n{where}{error.split(':')[0]}"
    )


def _failed(test_body, failing, error, **extra):
    rec = {
        "nodeid": "test_torchinductor.py::CpuTests::test_x_cpu",
        "outcome": "failed",
        "longrepr": _tb(test_body, failing, error),
        "message": error,
        "source": textwrap.dedent(test_body),
    }
    rec.update(extra)
    return rec


PASSED = {"outcome": "passed"}

CODE_TEST = """
def test_x(self):
    def fn(x):
        return x.sin() + 1

    _, code = run_and_get_code(torch.compile(fn), torch.randn(8))
"""

METRICS_TEST = """
def test_x(self):
    def fn(x):
        return x.cos()

    self.common(fn, (torch.randn(8),))
"""

RANDOM_TEST = """
@config.patch(implicit_fallbacks=True)
def test_x(self):
    def fn(x):
        return torch.rand_like(x) + x

    torch.manual_seed(0)
    self.common(fn, (torch.randn(8),))
"""

FALLBACK_RANDOM_TEST = """
@config.patch(fallback_random=True)
def test_x(self):
    def fn(x):
        return F.dropout(x, 0.5)

    self.common(fn, (torch.randn(8),))
"""

INPUTS_ONLY_RANDOM_TEST = """
def test_x(self):
    def fn(x):
        return x.exp()

    torch.manual_seed(1)
    self.common(fn, (torch.randn(8), torch.rand(3)))
"""

MISMATCH = "AssertionError: Tensor-likes are not close!\n\nMismatched elements: 3 / 8 (37.5%)"


def test_plain_outcomes():
    assert cc.classify({"outcome": "passed"}) == "pass"
    assert cc.classify({"outcome": "skipped", "message": "requires gpu"}) == "skip"
    assert cc.classify({"outcome": "xfailed"}) == "xfail"
    assert cc.classify({"outcome": "xpassed"}) == "xpass"
    assert cc.classify({"outcome": "crash", "message": "worker died: signal 11 (SIGSEGV)"}) == "crash"
    assert cc.classify({"outcome": "timeout"}) == "timeout"


def test_generated_code_checks_are_inductor_internal():
    rec = _failed(CODE_TEST, 'FileCheck().check("cpp_fused").run(code[0])', "IndexError: list index out of range")
    assert cc.classify(rec, PASSED) == "inductor-internal"
    rec = _failed(
        CODE_TEST, "_, (code,) = run_and_get_code(fn, x)", "ValueError: not enough values to unpack (expected 1, got 0)"
    )
    assert cc.classify(rec, PASSED) == "inductor-internal"
    # The test file's own wrapper of a code getter.
    rec = _failed(
        CODE_TEST,
        "_, (code,) = _run_and_get_stripped_kernels(fn, x)",
        "ValueError: not enough values to unpack (expected 1, got 0)",
    )
    assert cc.classify(rec, PASSED) == "inductor-internal"


def test_statement_over_several_lines():
    # pytest marks one line of a statement that spans several: the first...
    body = CODE_TEST + "    code = ' '.join(code)\n"
    tb = _tb(body, "self.assertEqual(", "AssertionError: Scalars are not equal!\n\nExpected 3 but got 0.")
    tb = tb.replace(
        ">       self.assertEqual(\n",
        ">       self.assertEqual(\n            code.count('aten.view'), 3\n        )\n",
    )
    rec = {"outcome": "failed", "longrepr": tb, "message": "AssertionError: Scalars are not equal!"}
    assert cc.classify(rec, PASSED) == "inductor-internal"
    # ... or the last.
    tb = _tb(METRICS_TEST, ").run(code)", "RuntimeError: something else")
    tb = tb.replace(">       ).run(code)", "        FileCheck().check_count(\n            'x', 1\n>       ).run(code)")
    rec = {"outcome": "failed", "longrepr": tb, "message": "RuntimeError: something else"}
    assert cc.classify(rec, PASSED) == "inductor-internal"
    # A plain correctness check after a code check is not internal.
    tb = _tb(CODE_TEST, "self.assertEqual(actual, expected)", MISMATCH)
    rec = {"outcome": "failed", "longrepr": tb, "message": MISMATCH}
    assert cc.classify(rec, PASSED) == "rdyn-only"


def test_code_checked_in_a_helper_frame():
    # The failing statement is in a helper that took the code from
    # run_and_get_code; the frame's arguments are printed over several lines.
    tb = _tb(METRICS_TEST, "actual = _assert_no_indirect(self, fn, x)", "AssertionError: False is not true")
    tb = tb.replace(
        "\n\ntest_torchinductor.py:1234: AssertionError",
        "\n\ntest_torchinductor.py:1234: \n"
        "_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ \n\n"
        "args = (tensor([[ 0.1,  0.2],\n"
        "        [-0.3587,  1.6374]]), 3)\n\n"
        "    def _assert_no_indirect(test_case, func, *args):\n"
        "        result, source_codes = run_and_get_code(func, *args)\n"
        ">       test_case.assertTrue(\n"
        "            any('TORCH_CHECK' in code for code in source_codes)\n"
        "        )\n"
        "E       AssertionError: False is not true\n\n"
        "test_torchinductor.py:745: AssertionError",
    )
    rec = {"outcome": "failed", "longrepr": tb, "message": "AssertionError: False is not true"}
    assert cc.classify(rec, PASSED) == "inductor-internal"


def test_hooks_into_inductor_then_plain_assertion():
    body = """
    def test_x(self):
        called = False

        def hook_fn(scheduler, nodes):
            nonlocal called
            called = True

        with add_scheduler_init_hook(hook_fn):
            actual = torch.compile(f)(x)
        self.assertEqual(ref, actual)
    """
    rec = _failed(body, "self.assertTrue(called)", "AssertionError: False is not true")
    assert cc.classify(rec, PASSED) == "inductor-internal"
    # A value mismatch in the same test is still rdyn's.
    rec = _failed(body, "self.assertEqual(ref, actual)", MISMATCH)
    assert cc.classify(rec, PASSED) == "rdyn-only"


def test_filecheck_errors_and_aoti_are_inductor_internal():
    rec = _failed(
        METRICS_TEST,
        "helper(code)",
        'RuntimeError: Expected to find "static_cast<int64_t>(256)" but did not find it\nFrom CHECK-COUNT-2: x',
    )
    assert cc.classify(rec, PASSED) == "inductor-internal"
    rec = _failed(
        METRICS_TEST,
        "res = torch.abs(a)",
        "RuntimeError: Failed to produce kernel library by using AOTI for CPU. Operator Name is aten::abs",
        nodeid="test_torchinductor.py::CpuTests::test_aoti_eager_override_registration_cpu",
    )
    assert cc.classify(rec, PASSED) == "inductor-internal"


def test_kernel_counts_are_inductor_internal():
    rec = _failed(
        METRICS_TEST,
        "self.assertEqual(torch._inductor.metrics.generated_kernel_count, 1)",
        "AssertionError: Scalars are not equal!\n\nExpected 1 but got 0.",
    )
    assert cc.classify(rec, PASSED) == "inductor-internal"


def test_a_frame_in_inductor_codegen_is_internal():
    rec = _failed(METRICS_TEST, "self.common(fn, (torch.randn(8),))", "KeyError: 'buf0'")
    rec["longrepr"] += "\n\n/venv/lib/python3.11/site-packages/torch/_inductor/codecache.py:2101: KeyError"
    assert cc.classify(rec, PASSED) == "inductor-internal"


def test_random_value_mismatch_is_rng():
    rec = _failed(RANDOM_TEST, "self.common(fn, (torch.randn(8),))", MISMATCH)
    assert cc.uses_random(rec)
    assert cc.classify(rec, PASSED) == "rng"
    rec = _failed(FALLBACK_RANDOM_TEST, "self.common(fn, (torch.randn(8),))", MISMATCH)
    assert cc.classify(rec, PASSED) == "rng"


def test_compiled_random_op_equal_to_eager_is_rng():
    # Inductor's random numbers are not eager's, and a test asserts that.
    body = """
    def test_x(self):
        x = torch.zeros(3, 6, device=self.device)
        compiled = torch.compile(torch.randn_like, backend="inductor")
        torch.manual_seed(0)
        eager_out = torch.randn_like(x)
        torch.manual_seed(0)
        self.assertNotEqual(eager_out, compiled(x))
    """
    rec = _failed(body, "self.assertNotEqual(eager_out, compiled(x))", "AssertionError: AssertionError not raised")
    assert cc.uses_random(rec)
    assert cc.classify(rec, PASSED) == "rng"


def test_random_test_that_raises_is_rdyn_only():
    # Not a value mismatch: rdyn failed to compile the random program.
    rec = _failed(
        RANDOM_TEST,
        "self.common(fn, (torch.randn(8),))",
        "rdyn.backend.CompileError: rdyn could not compile a graph: unsupported op aten.foo",
    )
    assert cc.classify(rec, PASSED) == "rdyn-only"


def test_random_inputs_alone_are_not_rng():
    # torch.randn/rand only make the inputs, outside the compiled function.
    rec = _failed(INPUTS_ONLY_RANDOM_TEST, "self.common(fn, (torch.randn(8), torch.rand(3)))", MISMATCH)
    assert not cc.uses_random(rec)
    assert cc.classify(rec, PASSED) == "rdyn-only"


def test_rdyn_only_and_inductor_fails_too():
    rec = _failed(
        METRICS_TEST,
        "self.common(fn, (torch.randn(8),))",
        "rdyn.backend.CompileError: rdyn could not compile a graph: lowering aten.cos: dtype",
    )
    assert cc.classify(rec, PASSED) == "rdyn-only"
    assert cc.classify(rec, None) == "rdyn-only"  # no baseline run
    assert cc.classify(rec, {"outcome": "failed", "message": "AssertionError"}) == "inductor-fails-too"
    assert cc.classify(rec, {"outcome": "crash"}) == "inductor-fails-too"


def test_shimmed_names_and_unexpected_successes():
    rec = _failed(
        METRICS_TEST,
        "self.assertFalse(complex_memory_overlap(t))",
        f"AttributeError: {cc.SHIM_MARKER} torch._inductor.compile_fx.complex_memory_overlap",
    )
    assert cc.classify(rec, PASSED) == "version-mismatch"
    rec = {"outcome": "failed", "longrepr": "Unexpected success", "message": ""}
    assert cc.classify(rec) == "xpass"


def test_error_message_from_e_lines():
    rec = _failed(METRICS_TEST, "self.common(fn, x)", "RuntimeError: rdyn: kernel failed\nmore detail")
    rec.pop("message")
    assert cc.first_line(cc.error_message(rec)) == "RuntimeError: rdyn: kernel failed"


def _events(*evs):
    return [json.dumps(e) for e in evs]


def test_records_from_events():
    a, b, c, d, e, f = (f"t.py::C::test_{x}" for x in "abcdef")
    lines = _events(
        {"event": "configure", "backend": "rdyn", "stubbed": []},
        {"event": "start", "nodeid": a},
        {"event": "report", "nodeid": a, "when": "setup", "outcome": "passed", "duration": 0.1},
        {"event": "report", "nodeid": a, "when": "call", "outcome": "passed", "duration": 0.5},
        {"event": "report", "nodeid": a, "when": "teardown", "outcome": "passed", "duration": 0.1},
        {"event": "stats", "nodeid": a, "graphs": 2, "nodes_fallback": 1, "fallback_ops": {"aten.foo": 1}},
        {"event": "finish", "nodeid": a},
        {"event": "start", "nodeid": b},
        {"event": "report", "nodeid": b, "when": "setup", "outcome": "passed", "duration": 0},
        {"event": "report", "nodeid": b, "when": "call", "outcome": "failed", "longrepr": "E  boom", "message": "X"},
        {"event": "report", "nodeid": b, "when": "teardown", "outcome": "passed", "duration": 0},
        {"event": "finish", "nodeid": b},
        {"event": "start", "nodeid": c},
        {"event": "report", "nodeid": c, "when": "setup", "outcome": "skipped", "message": "requires gpu"},
        {"event": "report", "nodeid": c, "when": "teardown", "outcome": "passed"},
        {"event": "finish", "nodeid": c},
        {"event": "start", "nodeid": d},
        {"event": "report", "nodeid": d, "when": "setup", "outcome": "failed", "message": "fixture"},
        {"event": "finish", "nodeid": d},
        {"event": "start", "nodeid": e},
        {"event": "report", "nodeid": e, "when": "call", "outcome": "skipped", "wasxfail": ""},
        {"event": "finish", "nodeid": e},
        {"event": "start", "nodeid": f},
    ) + ['{"event": "report", "nodeid": "t.py::C::test_f", "wh']  # cut off by the worker's death
    records, running = cr.records_from_events(lines)
    assert records[a]["outcome"] == "passed" and records[a]["duration"] == pytest.approx(0.7)
    assert records[a]["stats"] == {"graphs": 2, "nodes_fallback": 1, "fallback_ops": {"aten.foo": 1}}
    assert records[b]["outcome"] == "failed" and records[b]["message"] == "X"
    assert records[c]["outcome"] == "skipped"
    assert records[d]["outcome"] == "error"
    assert records[e]["outcome"] == "xfailed"
    assert running == f and records[f]["outcome"] is None


def test_missing_name_stub():
    stub = cp._Missing("torch.foo.bar")

    def test_thing():
        pass

    skipped = stub(test_thing)
    assert getattr(skipped, "__unittest_skip__", False)
    with pytest.raises(AttributeError, match=cc.SHIM_MARKER):
        stub(3)
    with pytest.raises(AttributeError, match=cc.SHIM_MARKER):
        stub.cache_clear
    assert cc.SHIM_MARKER in repr(stub)  # as unittest.mock.patch.object's error shows it


def test_entry_point_is_the_plugin_too():
    # Workers load ``-p conformance_plugin``; ``-p inductor_conformance``
    # (how they loaded it before the split) gets the same hooks.
    hooks = [name for name in vars(cp) if name.startswith("pytest_")]
    assert len(hooks) == 6
    for name in hooks:
        assert getattr(ic, name) is getattr(cp, name)


def test_shim_missing_imports(tmp_path):
    import torch.nn

    f = tmp_path / "test_thing.py"
    f.write_text("from torch.nn import Linear, NoSuchThingForConformance\nimport os\n")
    try:
        assert cp.shim_missing_imports(str(f)) == ["torch.nn.NoSuchThingForConformance"]
        assert isinstance(torch.nn.NoSuchThingForConformance, cp._Missing)
    finally:
        if "NoSuchThingForConformance" in vars(torch.nn):
            delattr(torch.nn, "NoSuchThingForConformance")


def test_results_and_summary():
    ids = ["f.py::CpuTests::test_a_cpu", "f.py::CpuTests::test_b_cpu", "f.py::CpuTests::test_c_cpu"]
    rdyn = {
        ids[0]: {"outcome": "passed", "stats": {"graphs": 1, "nodes_fallback": 2, "fallback_ops": {"aten.nonzero": 2}}},
        ids[1]: _failed(METRICS_TEST, "self.common(fn, x)", "RuntimeError: rdyn: bad stride\ndetail"),
        ids[2]: {"outcome": "crash", "message": "worker died: signal 11 (SIGSEGV)", "longrepr": "Fatal Python error"},
    }
    results = ic.build_results(ids, rdyn, {ids[1]: {"outcome": "passed"}}, {"test_file": "f.py", "classes": ["C"]})
    assert results["counts"]["pass"] == 1
    assert results["counts"]["rdyn-only"] == 1
    assert results["counts"]["crash"] == 1
    assert results["passes"]["with_eager_nodes"] == 1
    assert results["passes"]["eager_ops"] == {"aten.nonzero": 2}
    assert results["rdyn_only"] == [{"test": "test_b_cpu", "error": "RuntimeError: rdyn: bad stride"}]
    text = ic.summary_text(results)
    assert "test_b_cpu: RuntimeError: rdyn: bad stride" in text
    assert "test_c_cpu: worker died: signal 11 (SIGSEGV)" in text


SYNTHETIC = '''
import os, signal, time, unittest

class T(unittest.TestCase):
    def test_1_pass(self):
        pass

    def test_2_fail(self):
        def fn(x):
            return x + 1
        self.assertEqual(fn(1), 3)

    def test_3_skip(self):
        self.skipTest("no gpu")

    def test_4_crash(self):
        os.kill(os.getpid(), signal.SIGSEGV)

    def test_5_after_crash(self):
        pass

    def test_6_hang(self):
        time.sleep(60)

    def test_7_after_hang(self):
        pass
'''


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_runner_survives_crashes_and_hangs(tmp_path):
    f = tmp_path / "test_synthetic.py"
    f.write_text(SYNTHETIC)
    ids = [f"test_synthetic.py::T::test_{n}" for n in ("1_pass", "2_fail", "3_skip", "4_crash", "5_after_crash")]
    ids += ["test_synthetic.py::T::test_6_hang", "test_synthetic.py::T::test_7_after_hang"]
    # Backend "inductor": the plugin records events but replaces nothing.
    results = cr.run_tests("inductor", f, ids, tmp_path / "logs", chunk=10, jobs=1, timeout=3, progress=lambda m: None)
    outcomes = {n.split("::")[-1]: r["outcome"] for n, r in results.items()}
    assert outcomes == {
        "test_1_pass": "passed",
        "test_2_fail": "failed",
        "test_3_skip": "skipped",
        "test_4_crash": "crash",
        "test_5_after_crash": "passed",
        "test_6_hang": "timeout",
        "test_7_after_hang": "passed",
    }
    crash = results["test_synthetic.py::T::test_4_crash"]
    assert "SIGSEGV" in crash["message"]
    assert cc.classify(crash) == "crash"
    fail = results["test_synthetic.py::T::test_2_fail"]
    assert "def fn(x)" in fail["source"]  # the test's source, for the rng check
    assert cc.classify(fail, {"outcome": "passed"}) == "rdyn-only"
