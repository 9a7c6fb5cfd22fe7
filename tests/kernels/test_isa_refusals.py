"""Every ISA-table refusal names the problem and points at the user's own line."""
import inspect

import pytest

from tlaloc.kernels.ptx import KernelTemplate, PtxError, f32, inst, r32
from tlaloc.errors import TlalocError

from . import refusal_cases


def _marked_line(fn):
    lines, start = inspect.getsourcelines(fn)
    for i, text in enumerate(lines):
        if "# refused:" in text:
            return start + i, text.split("# refused:")[1].strip()
    raise AssertionError(f"{fn.__name__} has no `# refused:` marker")


@pytest.mark.parametrize("build,arch,ptx", refusal_cases.CASES, ids=[c[0].__name__ for c in refusal_cases.CASES])
def test_refusal_points_at_the_users_line(build, arch, ptx):
    line, expected = _marked_line(build)
    with pytest.raises(PtxError) as info:
        KernelTemplate(build.__name__, build).specialize(arch=arch, ptx=ptx)
    err = info.value
    assert err.filename == refusal_cases.__file__
    assert err.lineno == line, str(err)
    assert expected in str(err)
    assert str(err).startswith(f"{refusal_cases.__file__}:{line}: ")
    assert isinstance(err, TlalocError)


def test_there_are_at_least_ten_refusal_cases():
    assert len(refusal_cases.CASES) >= 10


def test_register_of_another_kernel_is_refused_at_the_call():
    stolen = {}

    def first(k):
        stolen["r"] = r32()
        inst("ret")

    def second(k):
        f = f32()
        inst("cvt.rn.f32.u32", f, stolen["r"]); line = inspect.currentframe().f_lineno  # noqa: E702
        stolen["line"] = line

    KernelTemplate("first", first).specialize()
    with pytest.raises(PtxError, match="belongs to another kernel") as info:
        KernelTemplate("second", second).specialize()
    assert info.value.lineno == inspect.getsourcelines(second)[1] + 2


def test_unknown_target_is_refused_at_the_specialize_call():
    t = KernelTemplate("t", lambda k: inst("ret"))
    with pytest.raises(PtxError, match="unknown target 'sm_61'") as info:
        t.specialize(arch="sm_61")
    assert info.value.filename == __file__


def test_suggestion_for_a_misspelt_opcode():
    t = KernelTemplate("t", refusal_cases.unknown_instruction)
    with pytest.raises(PtxError, match="did you mean add"):
        t.specialize()
