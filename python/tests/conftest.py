import glob
import os
import uuid

import pytest

import sluice


@pytest.fixture
def store(tmp_path):
    """A fresh store; the pipelines opened on it are closed afterwards. A
    file store under tmp_path, or, with SLUICE_TEST_STORE_ROOT set to a store
    URI (tests/s3_test.sh sets an s3:// one), a fresh prefix under it."""
    root = os.environ.get("SLUICE_TEST_STORE_ROOT")
    if root:
        location, sep, query = root.partition("?")
        yield f"{location.rstrip('/')}/{uuid.uuid4().hex[:12]}{sep}{query}"
    else:
        yield str(tmp_path / "store")
    sluice.close()


@pytest.fixture
def small_chunks():
    """Chunks of 64 KiB, so small tensors span several chunks."""
    sluice.configure(chunk_bytes=64 << 10)
    yield 64 << 10
    sluice.close()
    sluice.configure(chunk_bytes=4 << 20)


def data_objects(store_dir, name, step):
    return sorted(glob.glob(os.path.join(store_dir, "ckpt", name, f"{step:020d}", "data", "*.dat")))


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x40]))
        f.flush()
        os.fsync(f.fileno())
