"""moto's S3 server as a real process on a local port, and how tests name and read what is there.
The fixture `s3_server` reaches every test module through conftest.py."""

import subprocess
import sys
import time
import urllib.request

import pytest
from pyarrow import fs

from tests.test_address import free_port


@pytest.fixture(scope="module")
def s3_server():
    """moto's S3 server on a free local port; yields its host:port, with the bucket "runs" made."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "moto's server did not start"
                time.sleep(0.2)  # a poll's pace while the server starts, not synchronization
        filesystem, _ = fs.FileSystem.from_uri(uri(f"127.0.0.1:{port}", "runs") + "&allow_bucket_creation=true")
        filesystem.create_dir("runs")
        yield f"127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait()


def uri(endpoint: str, path: str) -> str:
    # credentials in the URI: every process that opens it (the learner's too) needs nothing else
    return f"s3://key:secret@{path}?endpoint_override={endpoint}&scheme=http&region=us-east-1"


def read_at(location: str, name: str) -> bytes:
    filesystem, root = fs.FileSystem.from_uri(location)
    with filesystem.open_input_stream(f"{root}/{name}") as source:
        return source.read()


def files_at(location: str) -> dict[str, int]:
    filesystem, root = fs.FileSystem.from_uri(location)
    infos = filesystem.get_file_info(fs.FileSelector(root, recursive=True))
    return {i.path[len(root) + 1:]: i.size for i in infos if i.type == fs.FileType.File}


