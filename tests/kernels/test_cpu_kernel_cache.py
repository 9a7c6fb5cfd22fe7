"""The cache of the built CPU-kernel library: a damaged entry is rebuilt, a non-compiler is refused.

Oracle: the library the compiler writes (its sha256), and whether it loads (dlopen). The
cache tests build the smallest kernel source alone; loading and registering the whole library
is tested wherever the kernels run (tests/kernels/test_cpu_matmul.py, tests/serving/test_cpu_kernels.py). Negative control: the damaged copy really is damaged (shorter, other digest).
"""
import hashlib
import os
import shlex
import shutil
import subprocess
import sys

import pytest

from tlaloc._runtime import cpu_kernels


def _one_small_source(monkeypatch) -> None:
    """Build only the smallest kernel source: what a test of the cache's files checks does not
    depend on which kernels the library holds (the library's loading is tested on the whole)."""
    small = min(cpu_kernels.SOURCES, key=os.path.getsize)
    monkeypatch.setattr(cpu_kernels, "SOURCES", [small])


def _compiler_or_skip() -> str:
    exe = shutil.which(shlex.split(os.environ.get("CXX") or "g++")[0])
    if exe is None:
        pytest.skip("no C++ compiler (g++ or $CXX) to build the CPU kernels")
    return exe


def test_a_truncated_cached_library_is_rebuilt_not_loaded(tmp_path, monkeypatch):
    # dlopen of a truncated library can kill the process (SIGBUS), so build() must check the
    # record before anything loads the file; the smallest source keeps the two builds short
    exe = _compiler_or_skip()
    monkeypatch.setenv("TLALOC_CACHE_DIR", str(tmp_path))
    _one_small_source(monkeypatch)
    path = cpu_kernels.build(exe)
    with open(path, "rb") as f:
        image = f.read()
    with open(path, "wb") as f:                                 # a crash mid-copy, a full disk: the head only
        f.write(image[:len(image) // 3])
    assert os.path.getsize(path) < len(image)                   # control: the entry is damaged
    assert cpu_kernels.build(exe) == path
    with open(path, "rb") as f:
        rebuilt = f.read()
    with open(path + ".sha256") as f:
        assert hashlib.sha256(rebuilt).hexdigest() == f.read().strip()
    assert rebuilt.startswith(b"\x7fELF") and len(rebuilt) > len(image) // 3
    import ctypes
    ctypes.CDLL(path)                                           # the rebuilt library loads


def test_a_cxx_that_writes_no_library_is_refused_and_nothing_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("TLALOC_CACHE_DIR", str(tmp_path))
    fake = shutil.which("true")
    if fake is None:
        pytest.skip("no `true` executable to stand in for a non-compiler")
    with pytest.raises(RuntimeError, match="wrote no shared library.*set CXX"):
        cpu_kernels.build(fake)
    assert not os.path.exists(cpu_kernels.library_path(fake))


def test_an_unwritable_cache_builds_into_a_private_directory(tmp_path, monkeypatch, caplog):
    exe = _compiler_or_skip()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")                       # as root, chmod cannot make a dir read-only
    monkeypatch.setenv("TLALOC_CACHE_DIR", str(blocker / "cache"))
    _one_small_source(monkeypatch)
    with caplog.at_level("WARNING", logger=cpu_kernels.log.name):
        path = cpu_kernels.build(exe)
    assert not path.startswith(str(tmp_path)) and os.path.basename(path).startswith("matmul-")
    with open(path, "rb") as f:
        assert f.read(4) == b"\x7fELF"
    assert "cannot write the cache" in caplog.text and "TLALOC_CACHE_DIR" in caplog.text
    shutil.rmtree(os.path.dirname(path))


def test_a_cxx_with_a_wrapper_or_flags_is_split_like_a_shell_word_list(tmp_path, monkeypatch):
    exe = _compiler_or_skip()
    monkeypatch.setenv("TLALOC_CACHE_DIR", str(tmp_path))
    _one_small_source(monkeypatch)
    compiler = f"{exe} -DTLALOC_UNUSED=1"    # as make passes $(CXX)
    path = cpu_kernels.build(compiler)
    with open(path, "rb") as f:
        assert f.read(4) == b"\x7fELF"
    with pytest.raises(RuntimeError, match=r"no C\+\+ compiler.*not on PATH"):
        cpu_kernels.build("no-such-compiler-xyz -O2")


@pytest.mark.parametrize("value, expected", [
    ("false", "False disabled by TLALOC_CPU_KERNELS=false"), ("OFF", "False disabled by TLALOC_CPU_KERNELS=OFF"),
    ("maybe", "False TLALOC_CPU_KERNELS='maybe' is not one of")])
def test_the_environment_switch_reads_the_usual_spellings_of_off(value, expected, tmp_path):
    code = "from tlaloc._runtime import cpu_kernels as k; print(k.load(), k.reason())"
    env = dict(os.environ, TLALOC_CPU_KERNELS=value, TLALOC_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip().startswith(expected)
    assert not os.path.exists(tmp_path / "cpu-kernels")                  # nothing was built


def test_the_cached_library_and_its_record_are_readable_by_every_user(tmp_path, monkeypatch):
    exe = _compiler_or_skip()
    monkeypatch.setenv("TLALOC_CACHE_DIR", str(tmp_path))
    _one_small_source(monkeypatch)
    path = cpu_kernels.build(exe)
    for name in (path, path + ".sha256"):
        assert os.stat(name).st_mode & 0o444 == 0o444, oct(os.stat(name).st_mode)
