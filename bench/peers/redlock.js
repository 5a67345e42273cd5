// redlock.js — node-redlock (npm redlock, with ioredis) on one Redis: the
// peer bench/run.sh's `peers` part measures lockcore's token against.
//   node redlock.js PORT [SECONDS [CLIENTS]]
// The library's defaults (driftFactor 0.01, retryCount 10, retryDelay 200 ms,
// retryJitter 100 ms), one Redlock per client over its one connection; the
// lease is 5000 ms, as lc_bench's. A fresh lock (random value) per cycle:
// lock() then unlock(), on the key lc_bench and redis_py_lock.py use.
'use strict';

const Redlock = require('redlock');
const { run, KEY } = require('./common');

run('node-redlock', (client) => {
    const redlock = new Redlock([client]);
    return async () => {
        const lock = await redlock.lock(KEY, 5000);
        await lock.unlock();
    };
}).catch((e) => {
    console.error(`redlock.js: ${e && e.stack ? e.stack : e}`);
    process.exit(1);
});
