// Node 20 lacks Promise.withResolvers (the TypeScript SDK declares Node >= 22); load with --import.
if (!Promise.withResolvers) Promise.withResolvers = function () { let resolve, reject; const promise = new Promise((a, b) => { resolve = a; reject = b; }); return { promise, resolve, reject }; };
