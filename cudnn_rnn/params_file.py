"""``cudnn_rnn.params_file`` is :mod:`cudnn_rnn.files.params_file`, the module itself under the name it is known by."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from .files import params_file as _params_file

if TYPE_CHECKING:
    from .files.params_file import *  # noqa: F403  (what type checkers see of the module this name stands for)

sys.modules[__name__] = _params_file
