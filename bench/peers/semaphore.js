// semaphore.js — redis-semaphore's Mutex (npm redis-semaphore, with
// ioredis) on one Redis: the peer bench/run.sh's `peers` part measures
// lockcore's token against.
//   node semaphore.js PORT [SECONDS [CLIENTS]]
// The library's defaults (lockTimeout 10000 ms, acquireTimeout 10000 ms,
// retryInterval 10 ms, refresh every 0.8 x lockTimeout while held), a new
// Mutex per cycle as its README does (acquire, then release in finally).
// The Mutex stores its lock at "mutex:" + the key lc_bench uses.
'use strict';

const { Mutex } = require('redis-semaphore');
const { run, KEY } = require('./common');

run('redis-semaphore', (client) => async () => {
    const mutex = new Mutex(client, KEY);
    await mutex.acquire();
    await mutex.release();
}).catch((e) => {
    console.error(`semaphore.js: ${e && e.stack ? e.stack : e}`);
    process.exit(1);
});
