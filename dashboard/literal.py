"""Visitor text shown as the characters it holds, never as markup.

A link's values, a k-NN label a learner typed, an uploaded file's content: Streamlit renders
`st.markdown`, `st.warning`, `st.caption`, subheaders ... as Markdown (CommonMark, GitHub's
tables, strikethrough and bare-URL links, `$` maths, `:name[...]` directives, `:material_x:`
icons, emoji shortcodes, arrows for `->`), and Plotly renders a subset of HTML (`<a href>`,
`<b>`, `<br>`) in titles, tick labels and hover text. Every such string goes through one of:

- `text(s)`: for a sentence, a heading, a `ui.text_table` cell (which escapes "|" itself);
- `code(s)`: the same text as an inline code span (a link's value, a token);
- `figure(s)`: for Plotly text.

Streamlit applies some rules after parsing, to the text it holds (bare URLs and e-mail
addresses become links; `:material_name:`, `:streamlit:` and, on a page with emoji, `:smile:`
become pictures; `->` becomes an arrow), where a backslash no longer counts. Those are broken
with an invisible WORD JOINER (U+2060) between the characters that would match.
"""

from __future__ import annotations

import re

from xai_core.figures.style import plain_text

JOINER = "\u2060"  # zero width, no line break: invisible, yet no rule matches across it
# Characters that make markup anywhere in a line (emphasis, code, links and images, HTML and
# entities, strikethrough, maths); CommonMark shows a backslash-escaped one as it is.
_ANYWHERE = re.compile(r"([\\`*_\[\]<&~$])")
# ... and at the start of a line (heading, quote, list, setext underline, numbered list):
# only the text's start can be one, as its newlines are gone
_AT_START = re.compile(r"^([#>+=-]|\d{1,9}[.)](?=\s|$))")
# Streamlit's rules on parsed text: a joiner after ":" or "@" (unless a space follows, as in
# a sentence) and inside "www." keeps "https://", "a@b.org", "www.x.org", ":material_x:",
# ":streamlit:", ":smile:" and a directive's ":red[" from matching; one between two of "-",
# "<", ">", "=", "~" keeps "->", "<=", "--" ... from turning into arrows and dashes.
_AFTER_PARSE = re.compile(r"(?<=[:@])(?=\S)|(?i:(?<=www)(?=\.))|(?<=[-<>=~])(?=[-<>=~])")


def _one_line(value) -> str:
    """Every run of whitespace (newlines, tabs) as one space: nothing can start a heading,
    a list, a quote or an indented block on a line of its own."""
    return " ".join(str(value).split())


def text(value) -> str:
    """Markdown that Streamlit shows as exactly `value` (on one line): no link, image,
    heading, emphasis, HTML, maths, colour, icon or emoji. Letters, digits and everyday
    punctuation stay as they are ("tabby, tabby cat", "3.5 (max)")."""
    joined = _AFTER_PARSE.sub(JOINER, _one_line(value))
    return _AT_START.sub(lambda m: m[0][:-1] + "\\" + m[0][-1], _ANYWHERE.sub(r"\\\1", joined))


def code(value) -> str:
    """`value` (on one line) as an inline code span: Markdown treats nothing inside as
    syntax, so only the fence needs care - longer than any run of backticks inside, with a
    space inside each end when the text starts or ends with one. Streamlit rewrites
    ":material/" everywhere in the source, code included; a joiner keeps it as typed."""
    body = _one_line(value).replace(":material/", ":" + JOINER + "material/") or " "
    longest = max((len(run) for run in re.findall("`+", body)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if body[0] in "` " or body[-1] in "` " else ""
    return f"{fence}{pad}{body}{pad}{fence}"


# Text for a Plotly title, label or hover text: its tags shown, not followed.
figure = plain_text
