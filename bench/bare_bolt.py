"""The baseline for bench/click_ack.py: a bare Bolt AsyncApp whose listener only acks."""

import os
import re

from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult


async def authorize(enterprise_id, team_id, user_id):
    return AuthorizeResult(
        enterprise_id=None, team_id=team_id, bot_token="xoxb-standin", bot_id="B0", bot_user_id="U0"
    )


app = AsyncApp(
    signing_secret=os.environ["SLACK_SIGNING_SECRET"], authorize=authorize, process_before_response=True
)


@app.action(re.compile(".*"))
async def only_ack(ack):
    await ack()


if __name__ == "__main__":
    app.start(port=int(os.environ["PORT"]), host="127.0.0.1")
