// Unit tests of the terminal's wire side (terminal_proto.ts; npm test): what the
// gateway's /v1/terminal (deploy/gateway/terminal.go) expects and sends.
import { describe, expect, it } from "vitest";
import { BEARER_PROTOCOL_PREFIX, TERMINAL_PROTOCOL, parseServerFrame, terminalProtocols, terminalUrl } from "./terminal_proto";

describe("terminalProtocols", () => {
  it("offers only the terminal protocol without a token", () => {
    expect(terminalProtocols("")).toEqual([TERMINAL_PROTOCOL]);
  });
  it("carries the token as base64url without padding (what the gateway decodes)", () => {
    // "alice?>" in base64 is YWxpY2U/Pg== : '/' must become '_', padding dropped.
    expect(terminalProtocols("alice?>")).toEqual([TERMINAL_PROTOCOL, BEARER_PROTOCOL_PREFIX + "YWxpY2U_Pg"]);
  });
  it("encodes a non-ASCII token as UTF-8", () => {
    expect(terminalProtocols("é")[1]).toBe(BEARER_PROTOCOL_PREFIX + "w6k");
  });
});

describe("terminalUrl", () => {
  it("uses ws: on http and wss: on https, at the page's origin", () => {
    expect(terminalUrl("http://gw:8080", "7", 1, "", 24, 80)).toBe("ws://gw:8080/v1/terminal?job_id=7&rank=1&rows=24&cols=80");
    expect(terminalUrl("https://gw", "7", 0, "", 30, 100).startsWith("wss://gw/v1/terminal?")).toBe(true);
  });
  it("runs a typed command under sh -c, one parameter per word, and none for the login shell", () => {
    const u = new URL(terminalUrl("http://gw", "3", 0, "nvidia-smi -L && echo $RANK", 24, 80));
    expect(u.searchParams.getAll("command")).toEqual(["sh", "-c", "nvidia-smi -L && echo $RANK"]);
    expect(new URL(terminalUrl("http://gw", "3", 0, "   ", 24, 80)).searchParams.has("command")).toBe(false);
  });
});

describe("parseServerFrame", () => {
  it("reads started, exit (code, signal, reason), notice and error frames", () => {
    expect(parseServerFrame('{"started":{"session_id":"s","node":"n1","pid":42}}')).toEqual({ kind: "started", text: "connected: node n1, pid 42", final: false });
    expect(parseServerFrame('{"exit":{"exit_code":3}}')).toEqual({ kind: "exit", text: "exited with code 3", final: true });
    expect(parseServerFrame('{"exit":{}}').text).toBe("exited with code 0");
    expect(parseServerFrame('{"exit":{"exit_code":-1,"signal":9,"reason":"idle for 30m"}}').text).toBe("killed by signal 9: idle for 30m");
    expect(parseServerFrame('{"notice":"idle: ends in 5 min"}')).toEqual({ kind: "notice", text: "idle: ends in 5 min", final: false });
    expect(parseServerFrame('{"error":{"code":7,"message":"job 3 belongs to bob"}}')).toEqual({ kind: "error", text: "PERMISSION_DENIED: job 3 belongs to bob", final: true });
  });
  it("does not throw on an unreadable or unknown frame", () => {
    expect(parseServerFrame("{not json").kind).toBe("unknown");
    expect(parseServerFrame('{"later":1}').kind).toBe("unknown");
  });
});
