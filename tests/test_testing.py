"""custom_op.testing's process-wide switches across threads: blocks on several threads that ask for the same
setting share it and restore the one before when the last of them ends, in whatever order they end (as a
decode function under decode_ahead enters them); a block asking for another setting while another thread
holds one raises and changes nothing; one thread's nested blocks undo in turn. Shown with
own_entropy_decoder, which runs on any machine; gpu_options shares its bookkeeping (tests/test_gpu.py
checks it on a GPU)."""

from __future__ import annotations

import contextlib

import pytest
import torch

import custom_op  # noqa: F401  (loads the operators)
from conftest import held_on_another_thread
from custom_op import testing


def own_decoder_now() -> bool:
    """The process's setting, read by setting it back to what it is."""
    now = bool(torch.ops.custom_op._set_own_entropy_decoder(True))
    torch.ops.custom_op._set_own_entropy_decoder(now)
    return now


def test_overlapping_blocks_with_one_setting_restore_it_when_the_last_ends():
    assert own_decoder_now() is True
    with held_on_another_thread(lambda: testing.own_entropy_decoder(False)) as release_first:
        with held_on_another_thread(lambda: testing.own_entropy_decoder(False)):
            assert own_decoder_now() is False
            release_first()  # the first to enter ends first: its setting must hold for the second
            assert own_decoder_now() is False
    assert own_decoder_now() is True


def test_another_setting_while_another_thread_holds_one_raises():
    with held_on_another_thread(lambda: testing.own_entropy_decoder(False)):
        with pytest.raises(RuntimeError, match=r"own_entropy_decoder\(on=True\).*another thread"):
            with testing.own_entropy_decoder(True):
                pass
        assert own_decoder_now() is False
        with testing.own_entropy_decoder(False):  # the same setting is shared
            assert own_decoder_now() is False
        assert own_decoder_now() is False
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


@contextlib.contextmanager
def false_then_true():
    with testing.own_entropy_decoder(False), testing.own_entropy_decoder(True):
        yield


def test_a_thread_may_not_share_a_setting_nested_on_another_thread():
    """Another thread holds False and then True inside it: a thread asking for True shares nothing with that
    inner block, which its own thread alone ends before its outer one."""
    with held_on_another_thread(false_then_true):
        with pytest.raises(RuntimeError, match="another thread"):
            with testing.own_entropy_decoder(True):
                pass
    assert own_decoder_now() is True
