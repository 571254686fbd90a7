"""The library's messages name Python arguments; ``cudnn-rnn`` reports them as its flags (cli/_flags.py)."""

from __future__ import annotations

import argparse
import inspect

import pytest

from cudnn_rnn.cli import convert
from cudnn_rnn.cli._flags import FLAGS, in_flags
from cudnn_rnn.convert import read_file, write_into
from cudnn_rnn.convert.readers import CONFIG_FIELDS, FoundRNN, choose


def test_every_flag_is_an_option_of_convert_and_every_argument_a_python_one() -> None:
    parser = argparse.ArgumentParser()
    convert.add_arguments(parser)
    options = {option for action in parser._actions for option in action.option_strings}
    assert set(FLAGS.values()) <= options
    python = (set(inspect.signature(read_file).parameters) | set(inspect.signature(choose).parameters)
              | set(inspect.signature(FoundRNN.to_params).parameters) | set(inspect.signature(write_into).parameters)
              | set(CONFIG_FIELDS))
    assert set(FLAGS) <= python


@pytest.mark.parametrize("message, flags", [
    ("x: pass fmt=FORMAT", "x: pass --from FORMAT"),
    ("the file holds 2 RNNs: a; b; pick one with names=[NAME], or stack consecutive layers with names=[FIRST, SECOND] "
     "or stack_all=True",
     "the file holds 2 RNNs: a; b; pick one with --name NAME, or stack consecutive layers with --name FIRST "
     "--name SECOND or --stack"),
    ("r: a reason: pass rnn_mode='rnn_tanh' or rnn_mode='rnn_relu', num_units=NUM_UNITS",
     "r: a reason: pass --rnn-mode rnn_tanh or --rnn-mode rnn_relu, --num-units NUM_UNITS"),
    ("num_layers=3 disagrees with the file: t (src) has num_layers=2; drop the argument or pick another RNN",
     "--num-layers 3 disagrees with the file: t (src) has num_layers=2; drop the flag or pick another RNN"),
    ("rnn_mode='gru' is not possible for t (src); it can be lstm", "--rnn-mode gru is not possible for t (src); it can "
                                                                   "be lstm"),
    ("a sentence. Pass allow_approximation=True to accept this.", "a sentence. Pass --allow-approximation to accept "
                                                                  "this."),
    ("cannot read 'p': key='encoder model' picks a checkpoint entry: leave key= out",
     "cannot read 'p': --key 'encoder model' picks a checkpoint entry: leave --key out"),
    ("or pass trust_pickle=True if you trust this file", "or pass --trust-pickle if you trust this file"),
])
def test_arguments_become_flags(message: str, flags: str) -> None:
    assert in_flags(message) == flags


@pytest.mark.parametrize("message", [
    "t (src): invalid configuration: num_proj > 0 needs rnn_mode='lstm'; got rnn_mode='gru', num_proj=1",
    "format 'keras' cannot hold an LSTM projection (num_proj=2): why",
    "t (src): invalid configuration: input_mode='skip_input' needs input_size == num_units",
    "cannot read '/data/key=1/fmt=x.npz': no such file",
    "dtype=float16 is not read here",
])
def test_facts_and_paths_stay_as_they_are(message: str) -> None:
    assert in_flags(message) == message
