"""Which replica holds this browser tab's session, and whether that session was restarted.

Behind the nginx recipe (deploy/nginx/vit-lens.conf) several `streamlit run` replicas
serve one class. A session lives in one replica's memory. A small invisible component
does two things in the browser tab:

- it names the replica serving the session in the cookie `vit_lens_replica`, so nginx
  keeps routing this browser (page, WebSocket, uploads, downloads) to it - also after
  a failover, when the replica that died comes back;
- it remembers the session it last saw in the tab's JavaScript memory. When a replica
  dies, Streamlit's client reconnects (nginx sends it to another replica) and gets a
  fresh session there, without rerunning the script; the beacon then reports the old
  session, which reruns the page on the new replica, and the page says that the session
  was restarted. A reload clears that memory, as it should: Streamlit starts a new
  session on every reload anyway.
"""

from __future__ import annotations

import os
import re
import uuid

import streamlit as st

COOKIE = "vit_lens_replica"
REPLICA_ENV = "VIT_LENS_REPLICA"
TOKEN_KEY = "session_token"
BEACON_KEY = "session_beacon"
RESTARTED_KEY = "session_restarted"
DISMISSED_KEY = "session_restart_dismissed"

_JS = """
export default function ({ data, setTriggerValue }) {
  const { token, cookie } = data;
  if (cookie) {
    document.cookie = cookie;
  }
  window.__vitLensSession = token;
  // Streamlit's client posts WEBSOCKET_DISCONNECTED / WEBSOCKET_CONNECTED to its host
  // window (itself, when not embedded). It reconnects without rerunning the script, so
  // after a reconnect report the session this tab had: a new session reruns and learns
  // that it replaced another one.
  window.__vitLensReport = () => setTriggerValue("previous_session", window.__vitLensSession);
  if (!window.__vitLensListening) {
    window.__vitLensListening = true;
    let lost = false;
    window.addEventListener("message", (event) => {
      const message = event.data || {};
      if (message.stCommVersion === undefined) return;
      if (message.type === "WEBSOCKET_DISCONNECTED") lost = true;
      if (message.type === "WEBSOCKET_CONNECTED" && lost) {
        lost = false;
        window.__vitLensReport();
      }
    });
  }
}
"""

_beacon = st.components.v2.component("vit_lens_session_beacon", js=_JS)


def replica_name() -> str:
    """$VIT_LENS_REPLICA, else this server's port: the value nginx's map knows."""
    name = os.environ.get(REPLICA_ENV) or str(st.get_option("server.port"))
    return re.sub(r"[^A-Za-z0-9_.-]", "", name)


def cookie_path() -> str:
    base = (st.get_option("server.baseUrlPath") or "").strip("/")
    return f"/{base}" if base else "/"


def cookie_header() -> str:
    """The replica cookie, written by the beacon below and by the request guard's readiness
    answer (no HttpOnly: the beacon rewrites it after a failover); "" without a name."""
    name = replica_name()
    return f"{COOKIE}={name}; Path={cookie_path()}; SameSite=Lax" if name else ""


def session_token() -> str:
    """A random id for this Streamlit session (never reused, tells sessions apart)."""
    return st.session_state.setdefault(TOKEN_KEY, uuid.uuid4().hex)


def track_session() -> None:
    """Mount the beacon (call once per run, in the sidebar: it draws nothing) and note a
    restart: the tab reports the session it had, and it is not this one."""
    result = _beacon(key=BEACON_KEY, height=0,
                     data={"token": session_token(), "cookie": cookie_header()},
                     on_previous_session_change=lambda: None)
    previous = getattr(result, "previous_session", None)
    if previous and previous != session_token():
        st.session_state[RESTARTED_KEY] = True


def was_restarted() -> bool:
    """True when this tab had another session before this one (its replica died or
    was restarted while the page stayed open)."""
    return bool(st.session_state.get(RESTARTED_KEY))


def restart_notice() -> None:
    """At the top of every page until dismissed: the session was restarted, and what was lost."""
    if not was_restarted() or st.session_state.get(DISMISSED_KEY):
        return
    st.warning("**Your session was restarted.** The server process that held it stopped, "
               "and another one has taken over. Your model, image and page choices in the "
               "address bar were kept; an uploaded image or k-NN examples you added are "
               "gone - add them again if you need them.", icon=":material/restart_alt:")
    st.button("OK", key="session_restart_ok",
              on_click=lambda: st.session_state.update({DISMISSED_KEY: True}))
