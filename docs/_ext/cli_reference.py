"""The ``cli-reference`` directive: the ``cudnn-rnn`` command, rendered from its real argparse parser.

Use it from reStructuredText (in a MyST page, inside an ``{eval-rst}`` block), where it is to
produce one section per subcommand::

    .. cli-reference::

It builds :func:`cudnn_rnn.cli.build_parser` and renders, for the command and for each subcommand
of :data:`cudnn_rnn.cli.COMMANDS` in order: the usage line, the description, the rest of the
subcommand module's docstring (reStructuredText), every option group with each option's
invocation (``--to FORMAT``), help, choices and default, and the epilog (the examples). Every option
is registered with Sphinx's standard domain, so a page can link one: ``{option}`cudnn-rnn convert --to```.

argparse has no public interface to walk a parser, so this reads its documented-by-use internals
(``_actions``, ``_action_groups``, the help formatter's ``_format_action_invocation`` and
``_expand_help``), as sphinx-argparse does. The width is fixed, so the page does not depend on the
terminal that builds it.
"""

from __future__ import annotations

import argparse
import inspect
import re
import textwrap
from typing import Any, cast

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.domains.std import StandardDomain
from sphinx.util.docutils import SphinxDirective

from cudnn_rnn import cli

#: the width argparse wraps the usage to
WIDTH = 88
#: the command's name on the page (its console script; ``python -m cudnn_rnn`` is the same)
PROG = "cudnn-rnn"


def subparsers_of(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """subcommand -> its parser, in the order they were added."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def formatter(parser: argparse.ArgumentParser) -> argparse.HelpFormatter:
    """The parser's own help formatter, at :data:`WIDTH` columns."""
    factory: Any = parser.formatter_class  # (typeshed declares only its prog argument; every formatter takes width)
    help_formatter: argparse.HelpFormatter = factory(prog=parser.prog, width=WIDTH)
    return help_formatter


def usage(parser: argparse.ArgumentParser) -> str:
    """The usage line(s) exactly as ``--help`` prints them at :data:`WIDTH` columns."""
    help_formatter = formatter(parser)
    help_formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return help_formatter.format_help().strip()


def invocation(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """``--to FORMAT``, ``-h, --help`` or ``IN``: how the option is written."""
    return formatter(parser)._format_action_invocation(action)


def help_text(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The option's help with ``%(default)s`` and the like filled in, then its choices and default."""
    text = formatter(parser)._expand_help(action) if action.help else ""
    extra = []
    choices = [str(choice) for choice in action.choices or ()]
    if action.metavar is not None and not all(choice in text for choice in choices):  # hidden by the metavar
        extra.append("one of " + ", ".join(choices))
    default = action.default
    if (action.option_strings and default not in (None, False, argparse.SUPPRESS) and action.nargs != 0
            and "default" not in text):
        extra.append(f"default {default}")
    if extra:
        text = f"{text.rstrip('.')} ({'; '.join(extra)})" if text else "; ".join(extra).capitalize()
    return text


def option_names(action: argparse.Action) -> list[str]:
    """The names a page can link the option by: its option strings, or a positional's metavar."""
    if action.option_strings:
        return list(action.option_strings)
    return [str(action.metavar or action.dest)]


def epilog_parts(epilog: str) -> list[tuple[str, str, str]]:
    """An epilog as argparse prints it, cut into ``("block", title, text)`` for a ``title:`` line and the
    indented lines under it (or indented lines alone, untitled), and ``("text", "", text)`` for paragraphs."""
    parts: list[tuple[str, str, str]] = []
    for chunk in re.split(r"\n(?=\S)", epilog.strip("\n")):  # a new part at each unindented line
        head, _, rest = chunk.partition("\n")
        if head.endswith(":") and rest.startswith(" "):
            parts.append(("block", head[:-1], textwrap.dedent(rest).strip("\n")))
        elif head.startswith(" "):
            parts.append(("block", "", textwrap.dedent(chunk).strip("\n")))
        elif parts and parts[-1][0] == "text":
            parts[-1] = ("text", "", parts[-1][2] + " " + chunk.strip())
        elif chunk.strip():
            parts.append(("text", "", " ".join(chunk.split())))
    return parts


#: what a help text shows as code: a ```...``` span, or an option such as ``--to`` (which would otherwise
#: have its dashes typeset as one)
CODE = re.compile(r"`([^`]+)`|(?<![\w-])(--?[A-Za-z][\w-]*)")


def paragraph_with_literals(text: str) -> nodes.paragraph:
    """A paragraph of plain text in which ```...``` spans and option names are code."""
    paragraph = nodes.paragraph()
    position = 0
    for match in CODE.finditer(text):
        paragraph += nodes.Text(text[position:match.start()])
        code = match[1] or match[2]
        paragraph += nodes.literal(code, code)
        position = match.end()
    paragraph += nodes.Text(text[position:])
    return paragraph


def visible(action: argparse.Action) -> bool:
    return action.help is not argparse.SUPPRESS and not isinstance(action, argparse._SubParsersAction)


class CliReference(SphinxDirective):
    """``cli-reference``: one section per ``cudnn-rnn`` subcommand, from the parser itself."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        for module in (cli, *(module for _, module, _ in cli.COMMANDS)):
            self.env.note_dependency(inspect.getfile(module))
        self.env.note_dependency(__file__)
        parser = cli.build_parser()
        result: list[nodes.Node] = [self.literal(usage(parser))]
        commands = nodes.bullet_list()
        for name, _, one_line in cli.COMMANDS:
            item = nodes.paragraph()
            item += nodes.reference("", "", nodes.literal(f"{PROG} {name}", f"{PROG} {name}"),
                                    internal=True, refid=self.section_id(name))
            item += nodes.Text(f": {one_line}")
            commands += nodes.list_item("", item)
        result.append(commands)
        subparsers = subparsers_of(parser)
        for name, module, _ in cli.COMMANDS:
            result.append(self.command_section(name, module, subparsers[name]))
        return result

    @staticmethod
    def section_id(name: str) -> str:
        return str(nodes.make_id(f"{PROG}-{name}"))

    @staticmethod
    def literal(text: str, language: str = "text") -> nodes.literal_block:
        block = nodes.literal_block(text, text)
        block["language"] = language
        return block

    def command_section(self, name: str, module: Any, parser: argparse.ArgumentParser) -> nodes.section:
        title = f"{PROG} {name}"
        section = nodes.section(ids=[self.section_id(name)], names=[nodes.fully_normalize_name(title)])
        self.state.document.note_implicit_target(section, section)
        section += nodes.title(title, "", nodes.literal(title, title))
        # the description is the first line of the module's docstring (reStructuredText), and the rest follows
        details = inspect.cleandoc(module.__doc__ or "").split("\n", 1)[1:]
        section += self.parsed(parser.description or "", inspect.getfile(module))
        section += self.literal(usage(parser))
        section += self.parsed(details[0] if details else "", inspect.getfile(module))
        program = f"{PROG}-{name}"
        for group in parser._action_groups:
            actions = [action for action in group._group_actions if visible(action)]
            if not actions:
                continue
            section += nodes.rubric("", "", *paragraph_with_literals(group.title or "").children)
            if group.description:
                section += paragraph_with_literals(group.description)
            entries = nodes.definition_list(classes=["cli-options"])
            for action in actions:
                entries += self.option_entry(program, parser, action)
            section += entries
        for kind, title, body in epilog_parts(parser.epilog or ""):
            if kind == "block":
                if title:
                    section += nodes.rubric("", "", *paragraph_with_literals(title).children)
                section += self.literal(body, "bash" if title == "examples" else "text")
            else:
                section += paragraph_with_literals(body)
        return section

    def parsed(self, text: str, source: str) -> list[nodes.Node]:
        """``text`` parsed as reStructuredText (the docstrings' markup), as nodes."""
        holder = nodes.container()
        lines = text.strip("\n").splitlines()
        if lines:
            self.state.nested_parse(StringList(lines, source=source), 0, holder)
        return list(holder.children)

    def option_entry(self, program: str, parser: argparse.ArgumentParser,
                     action: argparse.Action) -> nodes.definition_list_item:
        written = invocation(parser, action)
        term = nodes.term("", "", nodes.literal(written, written))
        std = cast(StandardDomain, self.env.get_domain("std"))
        for option in option_names(action):
            node_id = nodes.make_id(f"cmdoption-{program}-{option}")
            if node_id not in term["ids"]:
                term["ids"].append(node_id)
                std.add_program_option(program, option, self.env.docname, node_id)
        return nodes.definition_list_item("", term, nodes.definition("", paragraph_with_literals(
            help_text(parser, action))))


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("cli-reference", CliReference)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
