// common.js — the measurement loop the Node peers share (redlock.js,
// semaphore.js): CLIENTS clients, each with its own ioredis connection
// (as each lc_bench thread has its own lc_conn), loop acquire + release of
// one lock on one key for SECONDS, in one Node process (one event loop:
// how a Node service holds its connections). Prints one line as
// `lc_bench PORT S peer` does:
//   peer NAME clients=N cycles_per_s=R fairness=F failed=K
// fairness = min/max completed cycles per client; failed = acquisitions
// that gave up (the library's own timeout or retry limit). The rate is
// completed cycles over the time from the start to the last client's
// stop, as lc_bench counts it.
'use strict';

const Redis = require('ioredis');

function usage(name) {
    console.error(`usage: node ${name}.js PORT [SECONDS [CLIENTS]]`);
    process.exit(2);
}

// run(name, makeCycle): makeCycle(client) returns an async function that
// acquires and releases the lock once and throws when the acquisition
// gave up.
async function run(name, makeCycle) {
    const port = Number(process.argv[2]);
    const seconds = process.argv.length > 3 ? Number(process.argv[3]) : 2;
    const clients = process.argv.length > 4 ? Number(process.argv[4]) : 8;
    if (!(port > 0) || !(seconds > 0) || !(clients >= 1)) usage(name);

    const conns = [];
    for (let i = 0; i < clients; i++)
        conns.push(new Redis({ host: '127.0.0.1', port, lazyConnect: true }));
    await Promise.all(conns.map((c) => c.connect()));

    const done = new Array(clients).fill(0);
    const failed = new Array(clients).fill(0);
    let stop = false;
    const t0 = process.hrtime.bigint();
    const loops = conns.map(async (c, i) => {
        const cycle = makeCycle(c);
        while (!stop) {
            try {
                await cycle();
                done[i]++;
            } catch (e) {
                failed[i]++;
            }
        }
    });
    setTimeout(() => { stop = true; }, seconds * 1000);
    await Promise.all(loops);
    const elapsed = Number(process.hrtime.bigint() - t0) / 1e9;
    await Promise.all(conns.map((c) => c.quit()));

    const total = done.reduce((a, b) => a + b, 0);
    const max = Math.max(...done);
    const fair = max > 0 ? Math.min(...done) / max : 0;
    const nfailed = failed.reduce((a, b) => a + b, 0);
    console.log(`peer ${name} clients=${clients} cycles_per_s=${(total / elapsed).toFixed(0)} ` +
                `fairness=${fair.toFixed(2)} failed=${nfailed}`);
}

module.exports = { run, KEY: 'bench:{peer}:lock' };
