// Canonical workload W1 (resonate-specification work/ts): foo makes n sequential LOCAL calls to
// bar with ctx.run. Written against the async API. cfg: {id, group, n, via: "run"|"rpc"}.
import { Resonate } from "@resonatehq/sdk/async";
import { config, emit, settings } from "./tsshared.mjs";

const cfg = config();

async function foo(ctx, n) {
  const seen = [];
  for (let i = 0; i < n; i++) seen.push(await ctx.run("bar", i));
  return seen.length;
}

async function bar(ctx, i) {
  return i;
}

const resonate = new Resonate(settings(cfg));
resonate.register("foo", foo);
resonate.register("bar", bar);
// resonate.run claims the root in this process; resonate.rpc asks the server to dispatch it to
// the group (this process is its only worker).
const handle =
  cfg.via === "rpc"
    ? await resonate.rpc(cfg.id, "foo", cfg.n, resonate.options({ target: cfg.group }))
    : await resonate.run(cfg.id, "foo", cfg.n);
const result = await handle.result();
const again = await (await resonate.get(cfg.id)).result();
emit({ result, again });
await resonate.stop();
