"""Headless Chromium driven over the DevTools protocol: open a page, wait for text, read the DOM, type, screenshot.

A small client on purpose (aiohttp's WebSocket client, no browser download): Debian's ``chromium``
is started with its own empty profile and ``--remote-debugging-port=0``; the port it picked is
read from ``DevToolsActivePort`` in that profile. Every wait polls with a deadline; nothing here
measures how fast the page is.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp

# Without the background-networking flags Chromium keeps trying hosts this machine cannot reach.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--disable-extensions",
    "--no-first-run",
    "--no-default-browser-check",
    "--hide-scrollbars",
    "--mute-audio",
)


def chromium_path() -> str:
    for name in (os.environ.get("CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome"):
        if name and (found := shutil.which(name)):
            return found
    raise FileNotFoundError("no chromium on PATH (Debian: apt-get install -y chromium)")


class CdpError(RuntimeError):
    pass


class Browser:
    """One headless Chromium with one page; ``async with Browser() as page: await page.goto(url)``."""

    def __init__(self, width: int = 1600, height: int = 1000, start_timeout: float = 60.0) -> None:
        self.width, self.height, self.start_timeout = width, height, start_timeout
        self.profile = Path(tempfile.mkdtemp(prefix="gym-ui-chromium-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.session: aiohttp.ClientSession | None = None
        self.socket: aiohttp.ClientWebSocketResponse | None = None
        self.ids = itertools.count(1)
        self.log = self.profile / "chromium.log"

    async def __aenter__(self) -> Browser:
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [
                    chromium_path(),
                    *FLAGS,
                    f"--user-data-dir={self.profile}",
                    "--remote-debugging-address=127.0.0.1",
                    "--remote-debugging-port=0",
                    f"--window-size={self.width},{self.height}",
                    "about:blank",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        port = await self._devtools_port()
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        page = next(target for target in targets if target.get("type") == "page")
        self.session = aiohttp.ClientSession()
        self.socket = await self.session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        await self.send("Page.enable")
        await self.send("Runtime.enable")
        await self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
        )
        return self

    async def _devtools_port(self) -> int:
        deadline = time.monotonic() + self.start_timeout
        active = self.profile / "DevToolsActivePort"
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise CdpError(f"chromium exited with {self.process.returncode}: {self.log.read_text()[-2000:]}")
            if active.is_file() and (lines := active.read_text().split()):
                return int(lines[0])
            await asyncio.sleep(0.2)
        raise CdpError(f"chromium did not open its DevTools port within {self.start_timeout:.0f} s")

    async def __aexit__(self, *exc: object) -> None:
        if self.socket is not None:
            await self.socket.close()
        if self.session is not None:
            await self.session.close()
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=15)
        shutil.rmtree(self.profile, ignore_errors=True)

    async def send(self, method: str, params: dict[str, Any] | None = None, timeout: float = 60.0) -> dict[str, Any]:
        """One command; events that arrive before its answer are dropped (nothing here listens to them)."""
        assert self.socket is not None
        number = next(self.ids)
        await self.socket.send_str(json.dumps({"id": number, "method": method, "params": params or {}}))
        return await asyncio.wait_for(self._reply(method, number), timeout)

    async def _reply(self, method: str, number: int) -> dict[str, Any]:
        assert self.socket is not None
        while True:
            message = await self.socket.receive()
            if message.type != aiohttp.WSMsgType.TEXT:
                raise CdpError(f"DevTools connection closed while waiting for {method}: {message.type}")
            reply = json.loads(message.data)
            if reply.get("id") == number:
                if "error" in reply:
                    raise CdpError(f"{method}: {reply['error']}")
                return reply.get("result", {})  # type: ignore[no-any-return]

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", {"url": url})

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise CdpError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def url(self) -> str:
        return str(await self.evaluate("location.href"))

    async def text(self) -> str:
        """What the page shows as text: the rendered DOM's ``innerText`` (after its scripts ran)."""
        return str(await self.evaluate("document.body ? document.body.innerText : ''"))

    async def html(self) -> str:
        return str(await self.evaluate("document.documentElement.outerHTML"))

    async def wait_for_text(self, *needles: str, timeout: float = 90.0) -> str:
        """Poll the rendered text until every needle is in it; the text, or CdpError naming what is missing."""
        deadline = time.monotonic() + timeout
        text = ""
        while True:
            try:
                text = await self.text()
            except CdpError:  # the page navigated away mid-evaluation
                text = ""
            missing = [needle for needle in needles if needle not in text]
            if not missing:
                return text
            if time.monotonic() > deadline:
                raise CdpError(f"after {timeout:.0f} s the page at {await self.url()} still does not show {missing}")
            await asyncio.sleep(0.5)

    async def click_text(self, text: str, selector: str = "*") -> bool:
        """Click the innermost element matching ``selector`` whose own text is ``text``; whether one was found."""
        script = f"""(() => {{
            const wanted = {json.dumps(text)};
            const found = [...document.querySelectorAll({json.dumps(selector)})].filter(
                (element) => element.innerText && element.innerText.trim() === wanted && element.offsetParent !== null);
            const innermost = found.filter((element) => !found.some((other) => other !== element && element.contains(other)));
            if (!innermost.length) return false;
            innermost[0].scrollIntoView({{block: 'center'}});
            innermost[0].click();
            return true;
        }})()"""
        return bool(await self.evaluate(script))

    async def click_selector(self, selector: str) -> bool:
        """Click the first element matching ``selector`` (a button by its ``aria-label``, say); whether one was found."""
        script = f"""(() => {{
            const element = document.querySelector({json.dumps(selector)});
            if (!element) return false;
            element.scrollIntoView({{block: 'center'}});
            element.click();
            return true;
        }})()"""
        return bool(await self.evaluate(script))

    async def focus(self, selector: str) -> bool:
        """Focus the first element matching ``selector`` (an input, a code editor's content); whether one was found."""
        script = f"""(() => {{
            const element = document.querySelector({json.dumps(selector)});
            if (!element) return false;
            element.scrollIntoView({{block: 'center'}});
            element.focus();
            return document.activeElement === element || element.contains(document.activeElement);
        }})()"""
        return bool(await self.evaluate(script))

    async def press(self, key: str, code: str, key_code: int, modifiers: int = 0) -> None:
        """One key pressed and released on the focused element, as a person's keyboard sends it."""
        event = {"key": key, "code": code, "windowsVirtualKeyCode": key_code, "modifiers": modifiers}
        await self.send("Input.dispatchKeyEvent", {"type": "rawKeyDown", **event})
        await self.send("Input.dispatchKeyEvent", {"type": "keyUp", **event})

    async def type_text(self, text: str) -> None:
        """Text typed into the focused element (as an input method commits it)."""
        await self.send("Input.insertText", {"text": text})

    async def screenshot(self, path: Path) -> Path:
        data = await self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": False})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data["data"]))
        return path
