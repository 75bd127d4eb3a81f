"""A local Slack: the one stand-in, for the tests and the demo.

It speaks the Web API to the bot (point `SLACK_API_URL` at `base_url`) and
sends signed interaction payloads to the bot's real `/slack/events` endpoint,
the way Slack does, with Slack's rules enforced:

* Block Kit limits: bad blocks get `invalid_blocks` / `msg_blocks_too_long`,
  bad views `invalid_arguments`; nothing is truncated for you.
* Rate limits: chat.postMessage about one a second per channel (short bursts
  pass), others per method; over the limit, HTTP 429 with Retry-After.
  `fail_next` injects 429s and 5xx on demand.
* Acks: an interaction not answered within 3 s counts as failed, as Slack
  shows the user an error; `trigger_id`s live 3 s and work once.
* Modals: a click inside one reaches the bot as Slack sends it (`container`
  of type `view`, the `view` with its id, hash and private_metadata, no
  channel); views.update with a stale `hash` gets `hash_conflict`; views.push
  stacks at most 3 views and only from an interaction inside the modal; a
  views.open from inside a modal answers ok and shows nothing, as Slack's
  clients do; only the top view of the stack can be clicked.
* Slowness: `delay_next` makes Slack take a call (the message exists) and
  answer it late, as when a process dies before it learns the message's ts.
* Message metadata is kept and returned by conversations.history / .replies
  with `include_all_metadata`, as Slack does; bots may delete their messages.
  Both page with cursors (`limit`, `oldest`, `latest`, `inclusive`), at Tier 3;
  `distributed_app()` plays an app commercially distributed outside the
  Marketplace: 15 messages a call at most, one call a minute per method.
* response_url: each click on a message and each slash command carries one
  (a click inside a modal does not), served at /response/<id>: it replaces
  or deletes the message clicked, or answers in the channel or only to the
  person, at most 5 times within 30 minutes (then 404 `used_url` /
  `expired_url`); bad blocks get 400 `invalid_blocks`. Every use is a
  `response_url` call in `calls`; `response_urls` holds what each answers.
  Edits land in `Message.changes` with their source and time, so a click's
  `Interaction.sent_at` to its card changing can be measured.

* The app is configured as its manifest says (`app_config`): by default
  deploy/slack-manifest.yml's agent view (the Messages tab opened sends
  `app_home_opened` with tab "messages"; each message there is its own thread;
  prompts sit at the top of the tab); or an earlier install's assistant view
  (`assistant_thread_started` for each new chat). apps.manifest.export returns
  the manifest to the app configuration token.

It records every call so tests can assert what a person would have seen.

Split by job: `workspace` (what the workspace holds and shows), `app_config`
(the app's manifest), `webapi`
(the Web API the bot calls), `responses` (the response_urls the bot answers
interactions through), `blockkit` (Slack's limits), `people` (what people
do, and the payloads Slack sends the bot), `socket_mode` (the same, over a
Socket Mode WebSocket), `page` (the clickable page, `static/`).
"""

from __future__ import annotations

from aiohttp import web

from slack_standin.page import STATIC, Page
from slack_standin.responses import ResponseURLs
from slack_standin.webapi import WebAPI


class SlackStandin(WebAPI, ResponseURLs, Page):
    """The stand-in: a workspace, its Web API, its people and its page, on one local port."""

    _runner: web.AppRunner | None = None

    def web_app(self, page: bool = False) -> web.Application:
        app = web.Application()
        app.router.add_post("/api/{method}", self._api)
        app.router.add_get("/api/{method}", self._api)
        app.router.add_post("/response/{id}", self._response_url)
        app.router.add_get("/socket", self._socket)
        if page:
            app.router.add_get("/", self._page)
            app.router.add_static("/static/", STATIC)
            app.router.add_get("/archives/{channel}/{p}", self._page)  # permalinks open the page there
            app.router.add_get("/ui/state", self._ui_state)
            app.router.add_get("/ui/events", self._ui_events)
            app.router.add_post("/ui/{what}", self._ui_action)
        return app

    async def start(self, port: int = 0, host: str = "127.0.0.1", page: bool = False) -> str:
        """Serve the Web API (and, with `page`, the clickable Slack page at /)."""
        import aiohttp

        self._runner = web.AppRunner(self.web_app(page), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://{host}:{bound}/api/"
        self._socket_url = f"ws://{host}:{bound}/socket"
        self._session = aiohttp.ClientSession()
        return self.base_url

    async def stop(self) -> None:
        self.closing = True  # ends the page's event streams, which would hold the server open
        await self.close_sockets()
        if self._session:
            await self._session.close()
        if self._runner:
            await self._runner.cleanup()
