// Scenario 4: one workflow starts many ctx.beginRpc children at once, then gathers them.
// role "helper" is another worker of the same group; role "main" runs `fanOut` and serves too.
import { Resonate } from "@resonatehq/sdk";
import { config, emit, settings, untilTerminated } from "./tsshared.mjs";

function cube(ctx, i) {
  return i * i * i;
}

function* fanOut(ctx, n, group) {
  const started = [];
  for (let i = 0; i < n; i++) {
    started.push(yield* ctx.beginRpc("cube", i, ctx.options({ target: group })));
  }
  let sum = 0;
  for (const child of started) sum += yield* child;
  return { count: started.length, sum };
}

const cfg = config();
const resonate = new Resonate(settings(cfg));
resonate.register("cube", cube);
if (cfg.role === "helper") {
  await untilTerminated();
} else {
  resonate.register("fanOut", fanOut);
  emit(await resonate.run(cfg.id, "fanOut", cfg.n, cfg.group));
}
await resonate.stop();
