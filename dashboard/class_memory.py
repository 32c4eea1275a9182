"""A class kept across a reload: the instructor's key and a student's token in a cookie.

Streamlit starts a new session, with empty session state, on every reload, in every new tab
and after a replica's failover. The instructor's key leaves the address bar at once (it would
show on the projector), so before this a reload of the projector lost the class's controls,
and a student's reload counted one more student. A tiny component (it draws nothing) writes
the cookie; the next session reads it in `st.context.cookies`, which Streamlit fills from the
request that opened the session's WebSocket, so that session's first run knows the class: no
extra run, nothing on screen, and a second tab of the projector has the controls too.

- the instructor: `vit_lens_class_key` = `CODE.KEY`; a student: `vit_lens_class_token` =
  `CODE.TOKEN` (the random token the store keeps a digest of: nothing personal);
- both end with the class (`max-age`: the class's hours), are sent only to this app's path,
  `SameSite=Strict`, `Secure` over HTTPS; leaving or ending the class deletes them;
- what a cookie says is checked as a link is: the key against the class's digest, the code
  and the token by their alphabets, and nothing of it is ever shown.
"""

from __future__ import annotations

import re

import streamlit as st

from dashboard.replica import cookie_path
from xai_core.classroom import codes

TEACHER, STUDENT = "vit_lens_class_key", "vit_lens_class_token"
WRITTEN = "class_cookies_written"  # what this session's writer set
SECRET = re.compile(r"^[A-Za-z0-9_-]{32,64}$")  # codes.new_secret(): 43 URL-safe characters

_JS = """
export default function ({ data }) {
  const { cookies, path, seconds } = data;
  const secure = location.protocol === "https:" ? "; Secure" : "";
  for (const [name, value] of Object.entries(cookies)) {
    const age = value ? seconds : 0;
    document.cookie = `${name}=${value}; path=${path}; max-age=${age}; SameSite=Strict${secure}`;
  }
}
"""

_writer = st.components.v2.component("vit_lens_class_memory", js=_JS)


def browser_cookies() -> dict[str, str]:
    """The cookies the browser sent when this session opened (read-only)."""
    return dict(st.context.cookies)


def saved(name: str) -> tuple[str, str] | None:
    """(code, secret) from the cookie `name`, or None when it is absent or not one."""
    code, _, secret = browser_cookies().get(name, "").partition(".")
    code = codes.normalise_code(code)
    return (code, secret) if code and SECRET.match(secret) else None


def write(cookies: dict[str, str], hours: float) -> None:
    """Make the browser's cookies say this (name -> value; "" deletes the cookie), for
    `hours`. Call it once per full run where it draws nothing (the sidebar): it mounts the
    writer only when the browser holds something else (what it sent when this session opened,
    or what this session wrote since: `st.context.cookies` never changes in a session)."""
    held = {**browser_cookies(), **st.session_state.get(WRITTEN, {})}
    changes = {name: value for name, value in cookies.items() if held.get(name, "") != value}
    if changes:
        _writer(key="class_memory", height=0,
                data={"cookies": changes, "path": cookie_path(), "seconds": int(hours * 3600)})
        st.session_state[WRITTEN] = {**st.session_state.get(WRITTEN, {}), **changes}
