// Canonical workload W3 (resonate-specification work/ts): foo(n, m) is 1 at n = 0, else the sum of
// m calls to foo(n - 1, m), LOCAL (ctx.run) when n is even and REMOTE (ctx.rpc) when n is odd:
// a full m-ary tree of depth n whose edge kind alternates by level. cfg: {id, group, n, m, via}.
import { Resonate } from "@resonatehq/sdk/async";
import { config, emit, settings } from "./tsshared.mjs";

const cfg = config();

async function foo(ctx, n, m) {
  if (n === 0) return 1;
  let total = 0;
  for (let i = 0; i < m; i++) {
    total +=
      n % 2 === 0
        ? await ctx.run("foo", n - 1, m)
        : await ctx.rpc("foo", n - 1, m, ctx.options({ target: cfg.group }));
  }
  return total;
}

const resonate = new Resonate(settings(cfg));
resonate.register("foo", foo);
// resonate.run claims the root in this process; resonate.rpc asks the server to dispatch it to
// the group (this process is its only worker).
const handle =
  cfg.via === "rpc"
    ? await resonate.rpc(cfg.id, "foo", cfg.n, cfg.m, resonate.options({ target: cfg.group }))
    : await resonate.run(cfg.id, "foo", cfg.n, cfg.m);
const result = await handle.result();
const again = await (await resonate.get(cfg.id)).result();
emit({ result, again });
await resonate.stop();
