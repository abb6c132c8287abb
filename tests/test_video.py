"""The evaluation video: pictures of each kind of observation, and the animated PNG they become
(decoded back here with zlib, as a browser would), encoded frame by frame as an evaluation runs."""

import struct
import zlib

import numpy as np
import pytest

from raypex.actors.apng import ApngWriter
from raypex.actors.episode_video import cartpole_frame, frame_of


def decode_apng(data: bytes) -> tuple[int, list[np.ndarray]]:
    """(frame count from acTL, every frame's pixels) of an 8-bit gray or RGB APNG without filters."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, chunks = 8, []
    while position < len(data):
        (length,) = struct.unpack(">I", data[position:position + 4])
        kind, body = data[position + 4:position + 8], data[position + 8:position + 8 + length]
        (crc,) = struct.unpack(">I", data[position + 8 + length:position + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, kind
        chunks.append((kind, body))
        position += 12 + length
    width, height, _, colour = struct.unpack(">IIBB", chunks[0][1][:10])
    channels = 3 if colour == 2 else 1
    count = struct.unpack(">I", dict(chunks)[b"acTL"][:4])[0]
    frames = []
    for kind, body in chunks:
        if kind in (b"IDAT", b"fdAT"):
            raw = zlib.decompress(body if kind == b"IDAT" else body[4:])
            rows = np.frombuffer(raw, np.uint8).reshape(height, 1 + width * channels)
            assert (rows[:, 0] == 0).all()  # filter type none
            frames.append(rows[:, 1:].reshape(height, width, channels).squeeze())
    assert [kind for kind, _ in chunks][-1] == b"IEND"
    return count, frames


def test_gray_and_colour_frames_come_back_from_the_animation_unchanged():
    rng = np.random.default_rng(0)
    for shape in ((5, 84, 84), (3, 40, 30, 3)):
        frames = rng.integers(0, 256, shape, dtype=np.uint8)
        writer = ApngWriter()
        for frame in frames:
            writer.add(frame)
        count, decoded = decode_apng(writer.finish().data)
        assert count == len(frames) == len(decoded)
        assert all((d == f).all() for d, f in zip(decoded, frames))


def test_a_video_written_frame_by_frame_keeps_only_compressed_rows_and_knows_its_size():
    writer = ApngWriter()
    assert writer.finish() is None  # no frame, no video
    upright = cartpole_frame(np.zeros(4))
    for angle in np.linspace(0.0, 0.2, 50):
        writer.add(cartpole_frame(np.array([0.0, 0.0, angle, 0.0])))
    video = writer.finish()
    assert (video.height, video.width, video.channels, video.count) == (*upright.shape, 1, 50)
    assert len(video.data) < 50 * upright.size / 10  # a flat picture compresses tenfold and more
    count, decoded = decode_apng(video.data)
    assert count == 50 and (decoded[0] == upright).all() and not (decoded[-1] == upright).all()
    with pytest.raises(ValueError, match="one shape"):
        writer.add(np.zeros((10, 10), np.uint8))
    with pytest.raises(ValueError, match=r"\[H, W, 3\]"):
        ApngWriter().add(np.zeros((4, 10, 10), np.uint8))


def test_each_kind_of_observation_has_its_picture():
    stack = np.arange(4 * 84 * 84, dtype=np.uint32).reshape(4, 84, 84).astype(np.uint8)
    assert (frame_of(stack, "ALE/Pong-v5", stacked=True) == stack[-1]).all()  # the newest frame
    channels = np.zeros((4, 10, 10), np.uint8)
    channels[1, 2, 3] = 255  # MinAtar: one object in channel 1
    picture = frame_of(channels, "MinAtar/Breakout-v1", stacked=False)
    assert picture.shape == (80, 80, 3)  # enlarged 8x
    assert (picture[16:24, 24:32] == picture[16, 24]).all() and picture[16, 24].any() and not picture[0, 0].any()
    upright, leaning = cartpole_frame(np.zeros(4)), cartpole_frame(np.array([1.0, 0.0, 0.2, 0.0]))
    assert upright.shape == (100, 150) and not (upright == leaning).all()
    up = frame_of(np.array([1.0, 0.0, 0.0], np.float32), "Pendulum-v1", stacked=False)  # theta 0: upright
    down = frame_of(np.array([-1.0, 0.0, 0.0], np.float32), "Pendulum-v1", stacked=False)
    assert up.shape == (100, 100) and up[20, 50] < 255 == up[80, 50] and down[80, 50] < 255 == down[20, 50]
    assert frame_of(np.zeros(8, np.float32), "LunarLander-v3", stacked=False) is None  # no picture
