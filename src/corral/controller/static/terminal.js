// corral dashboard: a running task's terminal in the browser, and the list of a job's attachments.
// The terminal is xterm.js, vendored by `make install` (tools/vendor_static.py) and loaded only when one is
// opened. It speaks the relay's frames (corral.core.relay) over a WebSocket opened with a single-use ticket,
// since a browser cannot set a header there: keys go out as binary frames, output comes back as binary frames
// whose first byte names the stream, and control messages (resize; role, notice, exit) are JSON text frames.
"use strict";

const VENDOR = "/static/vendor";
const NOT_BUILT = "The terminal's files (xterm.js) are not built into this controller. Run `make install` in " +
  "corral's checkout: it vendors them into src/corral/controller/static/vendor. Then reload this page.";

let xtermLoading = null;

/** Loads xterm.js, its fit addon and its style once; fails, to be tried again, when the controller lacks them. */
function loadXterm() {
  const load = (tag, attrs) => new Promise((resolve, reject) => {
    document.head.append(h(tag, {...attrs, onload: resolve, onerror: () => reject(new Error(NOT_BUILT))}));
  });
  xtermLoading ||= Promise.all([load("script", {src: `${VENDOR}/xterm.js`}), load("script", {src: `${VENDOR}/addon-fit.js`}),
    load("link", {rel: "stylesheet", href: `${VENDOR}/xterm.css`})]).catch((error) => { xtermLoading = null; throw error; });
  return xtermLoading;
}

/** The buttons of a task's row: a terminal for an interactive job's running task, a shell in a batch one's. */
function terminalButtons(job, task, panel) {
  if (task.state !== "RUNNING") return null;
  const [label, mode] = job.spec.interactive ? ["Open terminal", "terminal"] : ["Shell in task", "exec"];
  return h("button", {type: "button", title: `task ${task.index}`, onclick: () => panel.open(task.index, mode)}, label);
}

/**
 * The panel under a job's tasks where one terminal at a time runs; closing it closes the WebSocket (an
 * interactive job's terminal keeps running, detached). `changed` is called when a channel opens or closes.
 */
function terminalPanel(jobId, changed) {
  const title = h("h2", {id: "terminal-title"}), status = h("p", {class: "status", role: "status"});
  const screen = h("div", {class: "screen"});
  const element = h("section", {class: "card terminal", "aria-labelledby": "terminal-title", hidden: true},
    h("div", {class: "head"}, title, h("div", {class: "actions"},
      h("button", {type: "button", class: "quiet", onclick: () => close()}, "Close terminal"))), status, screen);
  let session = null;
  const say = (text, kind = "") => { status.textContent = text; status.className = `status ${kind}`; };

  function close() {
    if (session) session.end();
    session = null;
    element.hidden = true;
  }

  async function open(index, mode) {
    close();
    const mine = {end() {}};  // a terminal still loading: connect() replaces it, unless it was closed meanwhile
    session = mine;
    fill(title, mode === "terminal" ? `Terminal of task ${index}` : `Shell in task ${index}`);
    fill(screen);
    element.hidden = false;
    element.scrollIntoView({block: "nearest"});
    say("Loading the terminal…");
    let ticket;
    try {
      await loadXterm();
      ({ticket} = await (await api(`/jobs/${jobId}/tickets`, {method: "POST"})).json());
    } catch (error) {
      if (session === mine) say(error.message, "error");
      return;
    }
    if (session !== mine) return;
    session = connect(index, mode, ticket);
  }

  function connect(index, mode, ticket) {
    const term = new Terminal({cursorBlink: true, fontSize: 13, scrollback: 5000,
      fontFamily: "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace"});
    const fit = new FitAddon.FitAddon();
    term.loadAddon(fit);
    term.open(screen);
    fit.fit();
    const query = new URLSearchParams({ticket, rows: term.rows, cols: term.cols});
    if (mode === "terminal") query.set("watch", "0");
    else { query.set("command", "/bin/sh"); query.set("tty", "1"); }
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const socket = new WebSocket(`${scheme}//${location.host}${API}/jobs/${jobId}/tasks/${index}/${mode}?${query}`);
    socket.binaryType = "arraybuffer";
    const encoder = new TextEncoder();
    const send = (frame) => { if (socket.readyState === WebSocket.OPEN) socket.send(frame); };
    let exit = null, ended = false;

    say("Connecting…");
    socket.onopen = () => { say("Connected."); term.focus(); changed(); };
    socket.onmessage = ({data}) => {
      if (typeof data !== "string") {  // byte 0 names the stream: a terminal's is all stdout, a shell's both
        if (data.byteLength > 1) term.write(new Uint8Array(data, 1));
        return;
      }
      let message;
      try { message = JSON.parse(data); } catch { return; }  // not a control message: nothing to show
      if (message.type === "role") {
        say(message.writer ? "Connected: your keys reach the terminal."
          : "Watching: another client holds the keyboard, your keys are not sent.", message.writer ? "" : "notice");
      } else if (message.type === "notice") {
        say(message.text, "notice");
        term.write(`\r\n\x1b[33m[corral] ${message.text}\x1b[0m\r\n`);
      } else if (message.type === "exit") {
        exit = message;
      }
    };
    socket.onclose = (event) => {
      if (exit) say(`The process exited${exit.code === null ? "" : ` with code ${exit.code}`}${exit.reason ? `: ${exit.reason}` : ""}.`);
      else if (event.code === 1000) say("The terminal closed.");
      else say(`Closed: ${event.reason || "the connection was lost"} (${event.code}).`, "error");
      term.options.disableStdin = true;
      changed();
    };
    term.onData((text) => send(encoder.encode(text)));
    term.onBinary((text) => send(Uint8Array.from(text, (c) => c.charCodeAt(0) & 255)));
    term.onResize(({rows, cols}) => send(JSON.stringify({type: "resize", rows, cols})));
    const resized = new ResizeObserver(throttle(() => { if (!ended) fit.fit(); }, 100));  // a late call finds it ended
    resized.observe(screen);
    return {
      end() {
        ended = true;
        resized.disconnect();
        socket.onclose = null;
        if (socket.readyState <= WebSocket.OPEN) { socket.close(1000, "closed in the dashboard"); changed(); }
        term.dispose();
      },
    };
  }

  return {element, open, stop: close};
}

/** What a channel was for, as `corral info` says it: the terminal's keyboard or a watch, the exec'd command, the port. */
function attachmentDetail(a) {
  const detail = a.detail || {};
  if (a.kind === "exec") return (detail.command || []).join(" ") + (detail.detach ? " (detached)" : "");
  if (a.kind === "port") return `port ${detail.port}`;
  return detail.watch ? "watching" : "keyboard";
}

/** Who reached into the job's tasks, from where and how it ended: open channels first, then the most recent. */
function attachmentsTable(attachments) {
  if (!attachments.length) return h("p", {class: "muted"}, "Nobody has attached to this job.");
  const live = (a) => (a.state === "open" || a.state === "opening" ? 0 : 1);
  const ordered = [...attachments].sort((a, b) => live(a) - live(b) || b.opened_at - a.opened_at);
  const closed = (a) => (a.closed_at ? `${clock(a.closed_at)} (${a.close_code ?? "-"}${a.close_reason ? `: ${a.close_reason}` : ""})` : "-");
  return h("table", {"aria-label": "attachments"}, h("thead", {}, h("tr", {},
    ["task", "kind", "what", "who", "from", "state", "opened", "closed"].map((c) => h("th", {scope: "col"}, c)))),
  h("tbody", {}, ordered.map((a) => h("tr", {"data-attachment": a.id, "data-state": a.state},
    h("td", {class: "num"}, `${a.task_index}#${a.attempt ?? "-"}`), h("td", {}, a.kind), h("td", {class: "mono"}, attachmentDetail(a)),
    h("td", {}, a.actor), h("td", {class: "mono"}, a.address ?? "-"), h("td", {}, badge(a.state)),
    h("td", {title: stamp(a.opened_at)}, `${clock(a.opened_at)} (${since(a.opened_at)} ago)`),
    h("td", {title: stamp(a.closed_at)}, closed(a))))));
}
