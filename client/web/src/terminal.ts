// The job page's terminal: `trainctl exec -i -t JOB --rank R -- CMD` in the
// browser. xterm.js draws the terminal; a WebSocket to the gateway's
// /v1/terminal (deploy/gateway/terminal.go) carries it: binary frames are the
// terminal's bytes both ways, text frames proto JSON (resize from here;
// started, exit, notice and error to here). The bearer token from the token
// box goes as a WebSocket subprotocol (browsers cannot set headers on a
// WebSocket); the coordinator checks, as for the CLI, that the caller owns
// the job or is an admin.
import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import "@xterm/xterm/css/xterm.css";

import { parseServerFrame, terminalProtocols, terminalUrl } from "./terminal_proto";

/**
 * One terminal session in `container`: opens the WebSocket, draws the output,
 * sends keys and resizes, and reports what happens through `onStatus`
 * (`final` once the session is over). close() ends it (the command is
 * killed, as when `trainctl exec` goes away).
 */
export class TerminalSession {
  private readonly term: Terminal;
  private readonly fit = new FitAddon();
  private readonly ws: WebSocket;
  private readonly observer: ResizeObserver;
  private over = false;

  constructor(container: HTMLElement, jobId: string, rank: number, command: string, token: string,
              private readonly onStatus: (text: string, final: boolean) => void) {
    this.term = new Terminal({ cursorBlink: true, fontSize: 13, convertEol: false, scrollback: 5000 });
    this.term.loadAddon(this.fit);
    this.term.open(container);
    this.fit.fit();
    this.ws = new WebSocket(terminalUrl(location.origin, jobId, rank, command, this.term.rows, this.term.cols), terminalProtocols(token));
    this.ws.binaryType = "arraybuffer";
    this.onStatus("connecting…", false);
    const encoder = new TextEncoder();
    this.ws.onmessage = (ev) => {
      if (ev.data instanceof ArrayBuffer) {
        this.term.write(new Uint8Array(ev.data));
        return;
      }
      const e = parseServerFrame(String(ev.data));
      if (e.kind === "notice") this.term.write(`\r\n[trainctl] ${e.text}\r\n`);
      if (e.final) this.over = true;
      this.onStatus(e.text, e.final);
    };
    this.ws.onclose = (ev) => {
      if (!this.over) this.onStatus(`disconnected${ev.reason ? `: ${ev.reason}` : ""} (code ${ev.code})`, true);
      this.over = true;
    };
    this.term.onData((d) => {
      if (this.ws.readyState === WebSocket.OPEN) this.ws.send(encoder.encode(d));
    });
    this.term.onResize(({ rows, cols }) => {
      if (this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify({ resize: { rows, cols } }));
    });
    this.observer = new ResizeObserver(() => this.fit.fit());
    this.observer.observe(container);
    this.term.focus();
  }

  /** Ends the session and frees the terminal. */
  close(): void {
    this.observer.disconnect();
    if (this.ws.readyState === WebSocket.OPEN || this.ws.readyState === WebSocket.CONNECTING) this.ws.close(1000, "closed on the page");
    this.term.dispose();
  }
}
