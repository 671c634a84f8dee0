// Plumbing shared by the TypeScript SDK programs. Every program takes one JSON argument, prints
// `RESULT <json>` when it has an answer and, when it serves as a worker, serves until SIGTERM.
import { closeSync, fsyncSync, openSync, writeSync } from "node:fs";

export function config() {
  return JSON.parse(process.argv[2]);
}

export function settings(cfg) {
  const opts = { url: process.env.RESONATE_URL, group: cfg.group };
  if (cfg.ttl_ms) opts.ttl = cfg.ttl_ms;
  if (cfg.pid) opts.pid = cfg.pid;
  // @resonatehq/sdk 0.11.5 reads RESONATE_TOKEN for POST / but hands only the `token` option to
  // its SSE stream, so the token is passed explicitly.
  if (process.env.RESONATE_TOKEN) opts.token = process.env.RESONATE_TOKEN;
  return opts;
}

export function emit(value) {
  console.log(`RESULT ${JSON.stringify(value)}`);
}

// Append one line durably: the test reads these files after a SIGKILL.
export function record(path, line) {
  const fd = openSync(path, "a");
  try {
    writeSync(fd, `${line}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

export function untilTerminated() {
  return new Promise((resolve) => {
    process.once("SIGTERM", resolve);
    process.once("SIGINT", resolve);
    console.log("READY");
  });
}

export function pause(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
