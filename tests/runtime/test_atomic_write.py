"""What a write replaces (issue 40, item 1): ``runtime.files.atomic_write`` and every caller of it
(``--output``, ``--save-params``, ``Executable.save``, the object cache) write atomically over a regular
file or a new name only. Devices, FIFOs, sockets and directories are refused and stay what they were; a
symlink is written through (the link kept), a dangling one refused; a new file gets 0666 less the umask
(as ``open()``), a replaced file keeps its mode and owner. The expected modes are POSIX's rule for
``open(O_CREAT)`` (mode & ~umask), computed here, not constants of the implementation."""
from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from builder.cli import main
from runtime.files import NotRegularFileError, atomic_write, check_writable

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "recipes" / "llama_mlp_small.yaml"


def _no_temporaries(folder: Path) -> bool:
    return not [p for p in folder.iterdir() if p.name.endswith(".tmp")]


def _in_subprocess(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with the repository on the path: a write that would block
    (opening a FIFO) ends as a timeout failure, never a hung test run."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the write blocked for {timeout} s")


def _char_device(folder: Path) -> Path:
    """A private copy of /dev/null (char 1:3) in ``folder``; skips where mknod is not permitted."""
    dev = folder / "null"
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot create a character device here: {exc}")
    return dev


# -- what is refused -------------------------------------------------------------------------------------

def test_a_character_device_is_refused_and_stays_a_device(tmp_path):
    dev = _char_device(tmp_path)
    with pytest.raises(NotRegularFileError, match=r"null is a character device"):
        atomic_write(dev, b"data")
    assert stat.S_ISCHR(os.lstat(dev).st_mode) and os.lstat(dev).st_rdev == os.makedev(1, 3)
    assert _no_temporaries(tmp_path)


def test_a_fifo_is_refused_without_blocking_and_stays_a_fifo(tmp_path):
    fifo = tmp_path / "out.npz"
    os.mkfifo(fifo)
    proc = _in_subprocess(f"from runtime.files import atomic_write\natomic_write({str(fifo)!r}, b'data')")
    assert proc.returncode == 1 and "NotRegularFileError" in proc.stderr and "is a FIFO" in proc.stderr, proc.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert _no_temporaries(tmp_path)


def test_a_symlink_to_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "out.npz"
    link.symlink_to(fifo)
    proc = _in_subprocess(f"from runtime.files import atomic_write\natomic_write({str(link)!r}, b'data')")
    assert proc.returncode == 1 and "is a symlink to" in proc.stderr and "a FIFO" in proc.stderr, proc.stderr
    assert os.path.islink(link) and os.readlink(link) == str(fifo) and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_directory_is_refused_and_kept(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "inside").write_bytes(b"kept")
    with pytest.raises(NotRegularFileError, match=r"out is a directory"):
        atomic_write(folder, b"data")
    assert (folder / "inside").read_bytes() == b"kept"
    assert _no_temporaries(tmp_path)


def test_a_socket_is_refused(tmp_path):
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        with pytest.raises(NotRegularFileError, match="a socket"):
            atomic_write(path, b"data")
        assert stat.S_ISSOCK(os.lstat(path).st_mode)


def test_a_dangling_symlink_is_refused_and_its_target_not_created(tmp_path):
    link = tmp_path / "out.npz"
    link.symlink_to(tmp_path / "missing" / "target.npz")
    with pytest.raises(NotRegularFileError, match="dangling symlink"):
        atomic_write(link, b"data")
    assert os.path.islink(link) and not (tmp_path / "missing").exists()
    link2 = tmp_path / "out2.npz"
    link2.symlink_to(tmp_path / "target2.npz")
    with pytest.raises(NotRegularFileError, match="dangling symlink"):
        atomic_write(link2, b"data")
    assert not (tmp_path / "target2.npz").exists()


def test_check_writable_refuses_what_atomic_write_refuses(tmp_path):
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFileError, match="a FIFO"):
        check_writable(fifo)
    check_writable(tmp_path / "new.npz")         # a new name and a regular file are fine
    (tmp_path / "old.npz").write_bytes(b"x")
    check_writable(tmp_path / "old.npz")
    assert not (tmp_path / "new.npz").exists()


# -- what is written, and how ----------------------------------------------------------------------------

def test_a_symlink_is_written_through_and_kept(tmp_path):
    target = tmp_path / "real" / "data.bin"
    target.parent.mkdir()
    target.write_bytes(b"old")
    os.chmod(target, 0o640)
    middle = tmp_path / "middle"
    middle.symlink_to(target)
    link = tmp_path / "link"
    link.symlink_to(middle)                       # a chain of two links
    atomic_write(link, b"new contents")
    assert os.readlink(link) == str(middle) and os.readlink(middle) == str(target)
    assert target.read_bytes() == b"new contents" and stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert _no_temporaries(tmp_path) and _no_temporaries(target.parent)


def test_without_following_the_link_itself_is_replaced(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_bytes(b"untouched")
    link = tmp_path / "entry"
    link.symlink_to(target)
    atomic_write(link, b"entry data", follow_symlinks=False, new_mode=0o600)
    assert not os.path.islink(link) and link.read_bytes() == b"entry data"
    assert target.read_bytes() == b"untouched"


def test_an_existing_file_keeps_its_mode_and_owner(tmp_path):
    path = tmp_path / "out.npz"
    path.write_bytes(b"old")
    os.chmod(path, 0o640)
    owner = None
    if os.geteuid() == 0:                       # only root may give a file away
        os.chown(path, 1234, 4321)
        owner = (1234, 4321)
    atomic_write(path, lambda fh: fh.write(b"new"))
    st = os.stat(path)
    assert path.read_bytes() == b"new" and stat.S_IMODE(st.st_mode) == 0o640
    if owner is not None:
        assert (st.st_uid, st.st_gid) == owner


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o027])
def test_a_new_file_gets_0666_less_the_umask(tmp_path, umask):
    path = tmp_path / "new.npz"
    code = (f"import os\nos.umask({umask})\nfrom runtime.files import atomic_write\n"
            f"atomic_write({str(path)!r}, b'data')\n")
    proc = _in_subprocess(code)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~umask      # POSIX open(O_CREAT, 0666)
    assert path.read_bytes() == b"data"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.npz"
    path.write_bytes(b"old")

    def boom(fh):
        fh.write(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(path, boom)
    assert path.read_bytes() == b"old" and _no_temporaries(tmp_path)


# -- the callers -------------------------------------------------------------------------------------------

def _x(tmp_path: Path) -> Path:
    path = tmp_path / "x.npz"
    np.savez(path, x=np.random.default_rng(0).standard_normal((2, 256)).astype(np.float32))
    return path


def test_cli_output_to_a_device_is_refused_with_one_message(tmp_path, capsys):
    dev = _char_device(tmp_path)
    assert main([str(SMALL), "--no-ir", "--input", str(_x(tmp_path)), "--output", str(dev)]) == 1
    out, err = capsys.readouterr()
    assert f"--output {dev} is a character device" in err and "Traceback" not in err, err
    assert "ran forward" not in out          # refused before the build and the run, not after them
    assert stat.S_ISCHR(os.lstat(dev).st_mode)


def test_cli_output_through_a_symlink_writes_the_target(tmp_path):
    target = tmp_path / "y.npz"
    target.write_bytes(b"old")
    os.chmod(target, 0o640)
    link = tmp_path / "link.npz"
    link.symlink_to(target)
    assert main([str(SMALL), "--no-ir", "--input", str(_x(tmp_path)), "--output", str(link)]) == 0
    assert os.path.islink(link) and stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert np.load(target)["output"].shape == (2, 256)


def test_cli_save_params_to_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "p.safetensors"
    os.mkfifo(fifo)
    proc = subprocess.run([sys.executable, "-m", "builder", str(SMALL), "--no-ir", "--save-params", str(fifo)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and f"{fifo} is a FIFO" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_save_params_through_a_symlink_keeps_the_link(tmp_path):
    from runtime.weights import read_safetensors_header, save_params

    target = tmp_path / "w.safetensors"
    target.write_bytes(b"old")
    link = tmp_path / "link.safetensors"
    link.symlink_to(target)
    save_params(link, {"a": np.arange(6, dtype=np.float32).reshape(2, 3)})
    assert os.path.islink(link)
    assert read_safetensors_header(target) == {"a": {"dtype": "float32", "shape": [2, 3]}}


def test_executable_save_to_a_directory_is_refused(tmp_path):
    import builder

    exe = builder.build(SMALL).exe
    folder = tmp_path / "exe"
    folder.mkdir()
    with pytest.raises(NotRegularFileError, match="is a directory"):
        exe.save(folder)
    assert folder.is_dir()


def test_object_cache_entries_are_private_and_never_written_through_a_link(tmp_path, monkeypatch):
    from builder.codegen import cache

    monkeypatch.setenv("MB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MB_CACHE", "1")
    old = os.umask(0o022)
    try:
        assert cache.store("k" * 64, b"object", "ir")
    finally:
        os.umask(old)
    entry = tmp_path / f"{'k' * 64}.mbo"
    assert stat.S_IMODE(os.stat(entry).st_mode) == 0o600
    fifo = tmp_path / f"{'f' * 64}.mbo"
    os.mkfifo(fifo)
    assert cache.store("f" * 64, b"object", "ir")               # the cache's own miss: replaced, never opened
    assert stat.S_ISREG(os.lstat(fifo).st_mode)
    folder = tmp_path / f"{'d' * 64}.mbo"
    folder.mkdir()
    assert cache.store("d" * 64, b"object", "ir") is False      # a folder is left alone: no entry, no error
    assert folder.is_dir()
    target = tmp_path / "outside"
    target.write_bytes(b"untouched")
    link = tmp_path / f"{'l' * 64}.mbo"
    link.symlink_to(target)
    assert cache.store("l" * 64, b"object", "ir")                # the link is replaced, never written through
    assert target.read_bytes() == b"untouched" and not os.path.islink(link)
