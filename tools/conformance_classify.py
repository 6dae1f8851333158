"""How tools/inductor_conformance.py sorts a test's result into a category.

Pure functions of a test's records (under rdyn and, for a failure, under
Inductor); the categories are described in inductor_conformance.py's
docstring. Unit-tested by tests/test_inductor_conformance.py.
"""

from __future__ import annotations

import ast
import re
import textwrap
from typing import Any

CATEGORIES = (
    "pass",
    "skip",
    "xfail",
    "xpass",
    "inductor-internal",
    "rng",
    "rdyn-only",
    "inductor-fails-too",
    "version-mismatch",
    "crash",
    "timeout",
)
SHIM_MARKER = "rdyn-conformance: not in this torch:"


# Failing lines or frames that show a test checking Inductor's internals.
_INTERNAL_PATTERNS = [
    # Also the test file's own wrappers (`_run_and_get_stripped_kernels`).
    r"(?<![A-Za-z0-9])_*run_and_get_(?:\w+_)?(?:code|cpp_code|triton_code|kernels|graph_lowering)\b",
    r"\brun_fw_bw_and_get_code\b",
    r"\bget_(?:code|cpp_code|triton_code)\b",
    r"\bFileCheck\b",
    r"\bmetrics\.\w+",
    r"\bgenerated_(?:kernel|cpp_vec_kernel)_count\b",
    r"\bnum_bytes_accessed\b",
    r"\bir_nodes_pre_fusion\b",
    r"\bcpp_to_dtype_count\b",
    r"\bcount_bytes_inductor\b",
    r"\bPyCodeCache\b",
    r"\bCppCodeCache\b",
    r"\bV\.graph\b",
    r"\bGraphLowering\b",
    r"\bcompile_fx_inner\b",
    r"\badd_scheduler_init_hook\b",
    r"\bassertExpectedInline\b",
    r"\bcodecache\.",
    r"counters\[[\"']inductor[\"']\]",  # Inductor's own event counters
    r"\binductor_wrapper_call\b",  # the profiler event of Inductor's wrapper
    r"Expected to find .* but did not find it|Expected not to find|From CHECK",  # FileCheck's errors
    r"(?<![a-z])aoti|\bAOTI\b|\baot_compile\b|\baot_inductor\b|AOTInductor",  # Inductor's AOT compiler
]
_INTERNAL_RE = re.compile("|".join(_INTERNAL_PATTERNS))
# Inductor hooks whose effects a test may check with a plain assertion.
_INTERNAL_SOURCE_RE = re.compile(
    r"\badd_scheduler_init_hook\b|\bV\.graph\b|\binner_fn_str\b|\bprofiler_mark_wrapper_call\b|"
    r"\b(?:post_grad|joint)_custom_(?:pre|post)_pass\b|\bregister_lowering\b|\bcompile_fx_inner\b"
)
# Frames in Inductor's own code that only run when Inductor compiled the
# graph (its caches, its code generators, its scheduler, its IR).
_INTERNAL_FRAME_RE = re.compile(
    r"torch/_inductor/(?:codecache|codegen/|scheduler|graph|ir|lowering|"
    r"runtime/|output_code|metrics|select_algorithm|kernel/)[\w/]*\.py:\d+"
)
# Random ops (called inside the test's compiled function).
RANDOM_CALLS = frozenset(
    {
        "rand",
        "randn",
        "randint",
        "rand_like",
        "randn_like",
        "randint_like",
        "randperm",
        "dropout",
        "dropout1d",
        "dropout2d",
        "dropout3d",
        "alpha_dropout",
        "feature_alpha_dropout",
        "native_dropout",
        "Dropout",
        "Dropout1d",
        "Dropout2d",
        "Dropout3d",
        "AlphaDropout",
        "bernoulli",
        "bernoulli_",
        "multinomial",
        "normal",
        "normal_",
        "uniform_",
        "exponential_",
        "geometric_",
        "log_normal_",
        "cauchy_",
        "random_",
        "poisson",
        "rrelu",
        "rrelu_",
        "RReLU",
        "seed",
        "manual_seed",
        "inductor_random",
        "inductor_seeds",
        "philox_rand",
    }
)
_RNG_TEXT_RE = re.compile(
    r"\bfallback_random\b|\binductor_random\b|\binductor_seeds?\b|\bphilox\w*|"
    # A random op compiled as it is: `torch.compile(torch.randn_like, ...)`.
    r"\bcompile\(\s*torch\.(?:rand|randn|randint|rand_like|randn_like|randint_like|randperm|bernoulli)\b"
)
# Messages of a value mismatch (rather than an exception in rdyn or torch).
_MISMATCH_RE = re.compile(
    r"Tensor-likes are not (?:close|equal)|Scalars are not (?:close|equal)|"
    r"not close|not equal|Mismatched elements|Greatest absolute difference|"
    r"^AssertionError: (?:False|True) is not (?:true|false)|AssertionError: \S+ != \S+|"
    # `assertNotEqual(eager, compiled)` of random numbers: rdyn's are eager's.
    r"^AssertionError: AssertionError not raised|"
    r"allclose",
    re.M,
)


def first_line(text: str | None) -> str:
    """The first non-empty line of an error message."""
    for line in (text or "").splitlines():
        line = line.strip()
        if line:
            return line
    return ""


def error_message(record: dict[str, Any]) -> str:
    """A failure's error (``ExcType: message``), from pytest's crash
    message or else from the ``E   `` lines of its traceback."""
    if record.get("message"):
        return str(record["message"])
    lines = [ln[1:].strip() for ln in (record.get("longrepr") or "").splitlines() if ln.startswith("E ")]
    return "\n".join(ln for ln in lines if ln)


_DEF_RE = re.compile(r"^[ >]   \s*(?:@|(?:async\s+)?def\s)")


def _source_start(lines: list[str], at: int) -> int:
    """Where the source of a frame that pytest prints begins: its function's
    first decorator or ``def`` line (the lines before it show the frame's
    arguments, whose values may span several indented lines)."""
    start = at
    while start > 0 and (lines[start - 1].startswith("    ") or lines[start - 1] == ""):
        start -= 1
    for i in range(start, at + 1):
        if _DEF_RE.match(lines[i]):
            return i
    return start


def frame_source(block: str) -> str:
    """The source shown for one frame of a long traceback (prefix removed)."""
    lines = block.splitlines()
    marks = [i for i, ln in enumerate(lines) if ln.startswith(">")]
    if not marks:
        return ""
    at = marks[-1]
    start = _source_start(lines, at)
    end = at + 1
    while end < len(lines) and (lines[end].startswith("    ") or lines[end] == ""):
        end += 1
    return "\n".join(ln[4:] for ln in lines[start:end])


def _failing_statement(lines: list[str], at: int) -> list[str]:
    """The whole statement around line `at` (the ``>`` line) of a frame's
    source as pytest prints it (4-column prefix, then the source): pytest
    marks one line of a statement that spans several."""
    start = _source_start(lines, at)
    end = at + 1
    while end < len(lines) and (lines[end].startswith("    ") or lines[end] == ""):
        end += 1
    block = [ln[4:] for ln in lines[start:end]]
    rel = at - start + 1
    try:
        tree = ast.parse(textwrap.dedent("\n".join(block)))
    except SyntaxError:
        return [ln.strip() for ln in block[max(0, rel - 3) : rel + 2]]
    best = None
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        first = node.lineno
        last = node.end_lineno or first
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            last = body[0].lineno - 1  # a compound statement: its header
            decorators = getattr(node, "decorator_list", [])
            if decorators:
                first = min(d.lineno for d in decorators)
        if first <= rel <= last and (best is None or last - first < best[1] - best[0]):
            best = (first, last)
    if best is None:
        return [block[rel - 1].strip()]
    return [ln.strip() for ln in block[best[0] - 1 : best[1]]]


def failing_lines(longrepr: str, errors: bool = True) -> list[str]:
    """The failing statement of each frame (pytest marks a line of it with
    ``>``) and, with `errors`, the ``E`` lines (the exception) and the frame
    locations (``path:line: Exc``) of a long-style traceback."""
    out = []
    for block in re.split(r"\n_ _ _[ _]*\n", longrepr):
        lines = block.splitlines()
        for i, line in enumerate(lines):
            if line.startswith(">"):
                out += _failing_statement([" " * 4 + ln[4:] if j == i else ln for j, ln in enumerate(lines)], i)
            elif not errors:
                continue
            elif line.startswith("E "):
                out.append(line[1:].strip())
            elif re.match(r"^\S+\.py:\d+:", line):
                out.append(line)
    return out


_CODE_GETTER_RE = re.compile(r"^(?:_*run_and_get_\w+|run_fw_bw_and_get_code|get_(?:cpp_|triton_)?code|get_code\w*)$")


def _names_bound_to_code(source: str) -> set[str]:
    """Names the test binds to Inductor's generated code: the targets of
    ``_, code = run_and_get_code(...)`` and the like."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or not isinstance(node.value, ast.Call):
            continue
        f = node.value.func
        fname = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        if not _CODE_GETTER_RE.match(fname):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Name) and sub.id != "_":
                    names.add(sub.id)
    return names


def is_inductor_internal(record: dict[str, Any]) -> bool:
    """Whether a failure comes from checking Inductor's internals: the
    failing statements call a code/metrics helper or read a value the test
    took from one (``_, code = run_and_get_code(...)``), the error is
    FileCheck's, or a frame of the traceback is in Inductor's code
    generation, caches or IR."""
    longrepr = record.get("longrepr") or ""
    name = (record.get("nodeid") or "").split("::")[-1]
    failing = failing_lines(longrepr)
    text = "\n".join(failing + [error_message(record), name])
    if _INTERNAL_RE.search(text):
        return True
    # Per frame: does its failing statement read what it took from a code getter?
    for block in re.split(r"\n_ _ _[ _]*\n", longrepr):
        source = frame_source(block)
        names = _names_bound_to_code(source)
        if "def test_" in source:
            names |= _names_bound_to_code(record.get("source") or "")
        statements = "\n".join(failing_lines(block, errors=False))
        if names and re.search(r"\b(?:%s)\b" % "|".join(map(re.escape, sorted(names))), statements):
            return True
    if _INTERNAL_FRAME_RE.search(longrepr):
        return True
    # A test that hooks into Inductor (its scheduler, graph, IR, wrapper)
    # and then fails a plain assertion (not a value mismatch, not an error
    # from rdyn) is checking what its hook saw.
    message = error_message(record)
    source = (record.get("source") or "") + "\n" + longrepr
    return bool(
        _INTERNAL_SOURCE_RE.search(source)
        and re.match(r"(?:AssertionError|assert\b)", message)
        and not re.search(r"Tensor-likes are not|Mismatched elements", message)
        and "rdyn" not in message
    )


def _calls_in_nested_functions(source: str) -> set[str]:
    """Names of the functions called inside functions (and lambdas) nested
    in the test function: the code the test compiles."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return set()
    names: set[str] = set()
    tops = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for top in tops or [tree]:
        for node in ast.walk(top):
            if node is top or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call):
                    f = sub.func
                    if isinstance(f, ast.Attribute):
                        names.add(f.attr)
                    elif isinstance(f, ast.Name):
                        names.add(f.id)
    return names


def uses_random(record: dict[str, Any]) -> bool:
    """Whether the test's compiled code draws random numbers: its source
    names ``fallback_random`` (or Inductor's rng ops), or a function nested
    in it (what it compiles) calls a random op."""
    source = record.get("source") or ""
    if _RNG_TEXT_RE.search(source) or _RNG_TEXT_RE.search(record.get("longrepr") or ""):
        return True
    return bool(_calls_in_nested_functions(source) & RANDOM_CALLS)


def is_value_mismatch(record: dict[str, Any]) -> bool:
    return bool(_MISMATCH_RE.search(error_message(record)))


def _failed(record: dict[str, Any] | None) -> bool:
    return record is not None and record.get("outcome") in ("failed", "error", "crash", "timeout")


def classify(rdyn: dict[str, Any], inductor: dict[str, Any] | None = None) -> str:
    """The category of one test, from its record under rdyn and (for a
    failure) under Inductor. A record has ``outcome`` (passed, failed,
    error, skipped, xfailed, xpassed, crash, timeout), ``longrepr`` (pytest's
    long traceback), ``message`` (pytest's one-paragraph crash message) and
    ``source`` (the test function's source, decorators included)."""
    outcome = rdyn.get("outcome")
    if outcome == "passed":
        return "pass"
    if outcome == "skipped":
        return "skip"
    if outcome == "xfailed":
        return "xfail"
    if outcome == "xpassed":
        return "xpass"
    if outcome == "crash":
        return "crash"
    if outcome == "timeout":
        return "timeout"
    text = error_message(rdyn) + "\n" + (rdyn.get("longrepr") or "")
    if "Unexpected success" in text:
        return "xpass"
    if SHIM_MARKER in text:
        return "version-mismatch"
    if _failed(inductor):
        return "inductor-fails-too"
    if is_inductor_internal(rdyn):
        return "inductor-internal"
    if uses_random(rdyn) and is_value_mismatch(rdyn):
        return "rng"
    return "rdyn-only"
