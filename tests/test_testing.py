"""custom_op.testing's process-wide switches across threads: blocks on several threads that ask for the same
setting share it and restore the one before when the last of them ends, in whatever order they end (as a
decode function under decode_ahead enters them); a block asking for another setting while another thread
holds one raises and changes nothing; one thread's nested blocks undo in turn. Shown with
own_entropy_decoder, which runs on any machine; gpu_options shares its bookkeeping (tests/test_gpu.py
checks it on a GPU)."""

from __future__ import annotations

import threading

import pytest
import torch

import custom_op  # noqa: F401  (loads the operators)
from custom_op import testing


def own_decoder_now() -> bool:
    """The process's setting, read by setting it back to what it is."""
    now = bool(torch.ops.custom_op._set_own_entropy_decoder(True))
    torch.ops.custom_op._set_own_entropy_decoder(now)
    return now


class Holder(threading.Thread):
    """A thread that enters own_entropy_decoder(on) and leaves it when told to."""

    def __init__(self, on: bool):
        super().__init__(daemon=True)
        self.on, self.entered, self.leave, self.error = on, threading.Event(), threading.Event(), None

    def run(self):
        try:
            with testing.own_entropy_decoder(self.on):
                self.entered.set()
                self.leave.wait(30)
        except Exception as e:  # noqa: BLE001 - handed to the test
            self.error = e
            self.entered.set()

    def end(self):
        self.leave.set()
        self.join(30)
        assert not self.is_alive()


def test_overlapping_blocks_with_one_setting_restore_it_when_the_last_ends():
    assert own_decoder_now() is True
    first, second = Holder(False), Holder(False)
    first.start()
    assert first.entered.wait(30)
    second.start()
    assert second.entered.wait(30)
    assert own_decoder_now() is False
    first.end()  # the first to enter ends first: its setting must hold for the second
    assert own_decoder_now() is False
    second.end()
    assert (first.error, second.error) == (None, None)
    assert own_decoder_now() is True


def test_another_setting_while_another_thread_holds_one_raises():
    holder = Holder(False)
    holder.start()
    assert holder.entered.wait(30)
    try:
        with pytest.raises(RuntimeError, match=r"own_entropy_decoder\(on=True\).*another thread"):
            with testing.own_entropy_decoder(True):
                pass
        assert own_decoder_now() is False
        with testing.own_entropy_decoder(False):  # the same setting is shared
            assert own_decoder_now() is False
        assert own_decoder_now() is False
    finally:
        holder.end()
    assert holder.error is None
    assert own_decoder_now() is True


def test_nested_blocks_on_one_thread_undo_in_turn():
    with testing.own_entropy_decoder(False):
        with testing.own_entropy_decoder(True):
            assert own_decoder_now() is True
            with testing.own_entropy_decoder(False):
                assert own_decoder_now() is False
            assert own_decoder_now() is True
        assert own_decoder_now() is False
    assert own_decoder_now() is True


def test_a_thread_may_not_share_a_setting_nested_on_another_thread():
    """Thread A holds False and then True inside it: a thread asking for True shares nothing with A's inner
    block, which A alone ends before its outer one."""
    inner_held, leave = threading.Event(), threading.Event()

    def nested():
        with testing.own_entropy_decoder(False):
            with testing.own_entropy_decoder(True):
                inner_held.set()
                leave.wait(30)

    a = threading.Thread(target=nested, daemon=True)
    a.start()
    assert inner_held.wait(30)
    try:
        with pytest.raises(RuntimeError, match="another thread"):
            with testing.own_entropy_decoder(True):
                pass
    finally:
        leave.set()
        a.join(30)
    assert own_decoder_now() is True
