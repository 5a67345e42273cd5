/* step.js — the live page's "step through" panel (GET / of miaosha-server;
 * inlined into live.html after live.js at build time).
 *
 * The learner is the scheduler: each buyer is a stepped purchase
 * (POST /miaosha/{mode}?step=1) that stops at every stage of the critical
 * section until its "next" is pressed (POST /steps/{id}/next). After every
 * step the panel shows the Redis keys that matter (GET /steps reads them:
 * the stock, sold, the lock key's value and TTL, the fence's high-water
 * mark; the audit's oversold comes from GET /stock/{sku}), draws each
 * buyer's lane with the timeline renderer as it goes, and says in one
 * sentence what just happened. The presets set up the classic lessons in
 * one click — stock reset, buyers added — and list the moves that teach
 * them; "next move of the lesson" plays them one by one.
 *
 * A stepped purchase's own HTTP request answers only when it is done, so
 * a buyer's step id is found in GET /steps by its user name (A, B, ...).
 * Stepped purchases need faults.enabled and, when the server has one, the
 * admin token (the "admin token" field of the controls above).
 *
 * Everything from the server is put into the page as text (textContent),
 * never as HTML. The language follows the page's (<html lang>, set by
 * live.js). Stable markers for tests: tr[data-buyer="A"] with
 * td[data-field="stage|read|written|lock|lease|reply"], button[data-next=
 * "A"], button[data-preset="lost_update|lock_waits|lease|fence|atomic"],
 * #stepsay, td[data-field="k-stock|k-sold|k-oversold|k-lock|k-pttl|
 * k-fence"]. */
(function () {
    'use strict';

    var POLL_MS = 400; /* while a buyer is not done: B's arrival, a lease running out */
    var NAMES = 'ABCDEFGH';
    var MODES = ['none', 'mutex', 'setnx', 'token', 'reentrant', 'fenced', 'lua'];

    var TEXT = {
        en: {
            title: 'Step through: be the scheduler',
            intro: 'Each buyer is a real purchase against the real Redis that stops at every ' +
                'stage of its critical section (start → locked → read → written → released → ' +
                'done) until you press its "next". Needs faults.enabled on the server.',
            mode: 'mode', sku: 'SKU', stock: 'stock', lease: 'lease_ms', reset: 'reset stock',
            add: 'add buyer', presets: 'lessons:', follow: 'next move of the lesson',
            buyer: 'buyer', stage: 'stage', h_read: 'read', h_wrote: 'wrote', lock: 'lock',
            leaseleft: 'lease left (ms)', reply: 'reply', keys: 'Redis keys that matter',
            kstock: 'stock', ksold: 'sold', koversold: 'oversold (audit)', klock: 'lock key',
            kpttl: 'its TTL (ms)', kfence: 'fence high-water mark', next: 'next', run: 'run',
            holds: 'holds', nothing: 'nothing', none: '–', nolock: 'no lock key in Redis', absent: '(none)',
            p_lost_update: 'the lost update (none)', p_lock_waits: 'the lock that waits (token)',
            p_lease: 'the lease that runs out (token)', p_fence: 'the fence that refuses (fenced)',
            p_atomic: 'the atomic script (lua)',
            g_lost_update: 'A reads, B reads, A writes, B writes: watch sold go up by 2 while ' +
                'the stock goes down by 1.',
            g_lock_waits: 'The same order with token: B waits while A holds the lock.',
            g_lease: 'A\'s lease (1.5 s) runs out while A sits after its read: B gets in.',
            g_fence: 'The same as the lease lesson, with fenced: the store refuses A\'s late ' +
                'write.',
            g_atomic: 'lua has nothing to interleave: each buyer is one step.',
            m_next: function (b, to) { return b + ': next' + (to ? ' → ' + to : ''); },
            m_waits: function (b) { return b + ': next (it will wait for the lock)'; },
            m_lease: function (b) { return 'wait until ' + b + '\'s lease runs out (watch the TTL)'; },
            m_arrive: function (b) { return 'watch ' + b + ' get the lock by itself'; },
            disabled: 'Stepped purchases are off on this server: start it with ' +
                '--set faults.enabled=true.',
            needtoken: 'This server needs its admin token: type it in the field above and try ' +
                'again.',
            badtoken: 'Wrong admin token.',
            full: 'Too many stepped purchases run (teach.max_steps): run the ones you have.',
            added: function (b, m) { return b + ' is a new ' + m + ' buyer, paused at start: ' +
                'nothing done yet.'; },
            lockedNone: function (b) { return b + ' passed the "lock" of mode none: it holds ' +
                'nothing, so nobody is kept out.'; },
            lockedMutex: function (b) { return b + ' holds the in-process mutex: buyers in ' +
                'this process wait, other instances would not.'; },
            locked: function (b, ms) { return b + ' holds the lock: its key holds ' + b +
                '\'s token' + (ms != null ? ', ' + ms + ' ms of lease left.' : '.'); },
            waits: function (b, h) { return b + ' waits: the lock is held' + (h ? ' by ' + h : '') +
                '. It keeps trying for its wait_ms.'; },
            readSame: function (b, v, o) { return b + ' read stock = ' + v + ', the same value ' +
                o + ' read: both will write ' + (v - 1) + '.'; },
            read: function (b, v) { return b + ' read stock = ' + v + '.'; },
            wroteSame: function (b, v, o) { return b + ' wrote stock = ' + v + ' too, after ' + o +
                ': two sales, the stock went down by one. One unit is oversold.'; },
            wrote: function (b, v) { return b + ' wrote stock = ' + v + ' and sold +1.'; },
            fenced: function (b) { return b + '\'s write was refused (fenced_out): a later ' +
                'holder\'s fencing token passed ' + b + '\'s. Nothing was written.'; },
            notWritten: function (b, e) { return b + '\'s commit did not write: ' + e + '.'; },
            releasedLost: function (b) { return b + '\'s release found the lock no longer ' + b +
                '\'s (lock_lost): its lease ran out while it worked.'; },
            released: function (b) { return b + ' released its lock.'; },
            doneLua: function (b, s) { return b + ' is done in one step (' + s + '): the lua ' +
                'script read and wrote in one atomic step, there was nothing to pause between.'; },
            done: function (b, s, e) { return b + ' is done: ' + s + (e ? ' ' + e : '') + '.'; },
            abandoned: function (b) { return b + ' was left paused too long and abandoned: its ' +
                'lock released, nothing more written.'; },
            atStart: function (b) { return b + ' is paused at start.'; }
        },
        zh: {
            title: '单步执行：由你来当调度器',
            intro: '每个买家都是对真实 Redis 的一次真实购买，它在临界区的每个阶段（开始 → 加锁 → 读 → ' +
                '写 → 释放 → 完成）停下，直到你按下它的“下一步”。服务端需要开启 faults.enabled。',
            mode: '模式', sku: '商品 SKU', stock: '库存', lease: '租约 lease_ms', reset: '重置库存',
            add: '添加买家', presets: '课程：', follow: '课程的下一步',
            buyer: '买家', stage: '阶段', h_read: '读到', h_wrote: '写入', lock: '锁',
            leaseleft: '剩余租约（毫秒）', reply: '响应', keys: '关键的 Redis 键',
            kstock: '库存 stock', ksold: '已售 sold', koversold: '超卖（对账）', klock: '锁的键',
            kpttl: '它的 TTL（毫秒）', kfence: '围栏高水位', next: '下一步', run: '跑完',
            holds: '持有', nothing: '无锁', none: '–', nolock: 'Redis 里没有锁的键', absent: '（无）',
            p_lost_update: '丢失的更新（none）', p_lock_waits: '会等待的锁（token）',
            p_lease: '租约过期（token）', p_fence: '拒绝过期写入的围栏（fenced）',
            p_atomic: '原子脚本（lua）',
            g_lost_update: 'A 读、B 读、A 写、B 写：已售加了 2，库存只减了 1。',
            g_lock_waits: '同样的顺序换成 token：A 持锁时 B 只能等待。',
            g_lease: 'A 读完后停着，它的租约（1.5 秒）过期了：B 拿到了锁。',
            g_fence: '与租约课程相同，换成 fenced：存储拒绝了 A 迟到的写入。',
            g_atomic: 'lua 没有可以穿插的地方：每个买家只有一步。',
            m_next: function (b, to) { return b + '：下一步' + (to ? ' → ' + to : ''); },
            m_waits: function (b) { return b + '：下一步（它会等锁）'; },
            m_lease: function (b) { return '等 ' + b + ' 的租约过期（看 TTL）'; },
            m_arrive: function (b) { return '看 ' + b + ' 自己拿到锁'; },
            disabled: '该服务没有开启单步购买：用 --set faults.enabled=true 启动它。',
            needtoken: '该服务需要管理员令牌：在上面的输入框填写后再试。',
            badtoken: '管理员令牌不对。',
            full: '单步购买太多（teach.max_steps）：先把已有的跑完。',
            added: function (b, m) { return b + ' 是新的 ' + m + ' 买家，停在开始：什么都还没做。'; },
            lockedNone: function (b) { return b + ' 通过了 none 模式的“锁”：它什么也没锁住，谁都挡不住。'; },
            lockedMutex: function (b) { return b + ' 持有进程内互斥锁：本进程的买家要等，其他实例不用等。'; },
            locked: function (b, ms) { return b + ' 持有锁：锁的键里是 ' + b + ' 的持有者标识' +
                (ms != null ? '，租约还剩 ' + ms + ' 毫秒。' : '。'); },
            waits: function (b, h) { return b + ' 在等待：锁被' + (h ? ' ' + h + ' ' : '') +
                '持有。它会在 wait_ms 内一直重试。'; },
            readSame: function (b, v, o) { return b + ' 读到库存 = ' + v + '，和 ' + o +
                ' 读到的一样：两人都会写 ' + (v - 1) + '。'; },
            read: function (b, v) { return b + ' 读到库存 = ' + v + '。'; },
            wroteSame: function (b, v, o) { return b + ' 在 ' + o + ' 之后也写了库存 = ' + v +
                '：卖出两件，库存只减了一件。超卖了一件。'; },
            wrote: function (b, v) { return b + ' 写入库存 = ' + v + '，已售 +1。'; },
            fenced: function (b) { return b + ' 的写入被拒绝（fenced_out）：后来的持有者的围栏令牌超过了 ' +
                b + ' 的。什么都没写。'; },
            notWritten: function (b, e) { return b + ' 的提交没有写入：' + e + '。'; },
            releasedLost: function (b) { return b + ' 释放时发现锁已经不是自己的了（lock_lost）：' +
                '它的租约在业务执行时过期了。'; },
            released: function (b) { return b + ' 释放了锁。'; },
            doneLua: function (b, s) { return b + ' 一步完成（' + s + '）：lua 脚本在一个原子步骤里' +
                '读和写，中间没有可以停的地方。'; },
            done: function (b, s, e) { return b + ' 完成：' + s + (e ? ' ' + e : '') + '。'; },
            abandoned: function (b) { return b + ' 停得太久被放弃了：锁已释放，没有再写任何东西。'; },
            atStart: function (b) { return b + ' 停在开始。'; }
        }
    };

    /* The lessons: the mode, each buyer's extra parameters, and the moves
     * that teach them ([buyer, kind, stage it arrives at]). */
    var LONG = {wait_ms: 30000};
    var PRESETS = {
        lost_update: {mode: 'none', buyers: [{}, {}],
            moves: [['A', 'next', 'locked'], ['A', 'next', 'read'], ['B', 'next', 'locked'],
                ['B', 'next', 'read'], ['A', 'next', 'written'], ['B', 'next', 'written'],
                ['A', 'next', 'released'], ['B', 'next', 'released'], ['A', 'next', 'done'],
                ['B', 'next', 'done']]},
        lock_waits: {mode: 'token', buyers: [LONG, LONG],
            moves: [['A', 'next', 'locked'], ['B', 'waits'], ['A', 'next', 'read'],
                ['A', 'next', 'written'], ['A', 'next', 'released'], ['B', 'arrive', 'locked'],
                ['B', 'next', 'read'], ['B', 'next', 'written'], ['B', 'next', 'released'],
                ['A', 'next', 'done'], ['B', 'next', 'done']]},
        lease: {mode: 'token', buyers: [{lease_ms: 1500}, {lease_ms: 30000, wait_ms: 30000}]},
        fence: {mode: 'fenced', buyers: [{lease_ms: 1500}, {lease_ms: 30000, wait_ms: 30000}]},
        atomic: {mode: 'lua', buyers: [{}, {}],
            moves: [['A', 'next', 'done'], ['B', 'next', 'done']]}
    };
    PRESETS.lease.moves = PRESETS.fence.moves = [['A', 'next', 'locked'], ['A', 'next', 'read'],
        ['A', 'lease'], ['B', 'next', 'locked'], ['B', 'next', 'read'], ['A', 'next', 'written'],
        ['A', 'next', 'released'], ['B', 'next', 'written'], ['B', 'next', 'released'],
        ['A', 'next', 'done'], ['B', 'next', 'done']];

    var el = function (id) { return document.getElementById(id); };
    var lang = 'en';
    var buyers = []; /* {name, mode, id, reply, row} in the order added */
    var last = {steps: [], redis: {}, now: null, audit: null};
    var lesson = null; /* {moves, at} */
    var polling = false, busy = false, pending = 0;
    var said = {key: null, args: null};

    function t(key) {
        return (TEXT[lang] && TEXT[lang][key]) || TEXT.en[key] || key;
    }

    function pageLang() {
        return /^zh/i.test(document.documentElement.lang || '') ? 'zh' : 'en';
    }

    function applyLang() {
        lang = pageLang();
        var nodes = document.querySelectorAll('[data-step-i18n]');
        for (var i = 0; i < nodes.length; i++)
            nodes[i].textContent = t(nodes[i].getAttribute('data-step-i18n'));
        var p = document.querySelectorAll('#steppresets button');
        for (i = 0; i < p.length; i++)
            p[i].textContent = t('p_' + p[i].getAttribute('data-preset'));
        if (said.key) say(said.key, said.args, said.bad);
        drawPlan();
        render();
    }

    /* ---- talking to the server ---- */

    function headers() {
        var h = {};
        var tok = el('token') && el('token').value;
        if (tok) h.Authorization = 'Bearer ' + tok;
        return h;
    }

    function call(method, path, body) {
        var init = {method: method, cache: 'no-store', headers: headers()};
        if (body !== undefined) {
            init.headers['Content-Type'] = 'application/json';
            init.body = JSON.stringify(body);
        }
        return fetch(path, init).then(function (r) {
            return r.json().catch(function () { return null; })
                .then(function (b) { return {status: r.status, body: b}; });
        });
    }

    /* A refusal of the guard, said; true when r was one. */
    function refused(r) {
        if (r.status === 401) {
            if (el('tokenbox')) el('tokenbox').hidden = false;
            say('needtoken', [], true);
        } else if (r.status === 403 && r.body && r.body.error === 'faults_disabled') {
            say('disabled', [], true);
        } else if (r.status === 403) {
            say('badtoken', [], true);
        } else if (r.status === 429) {
            say('full', [], true);
        } else {
            return false;
        }
        return true;
    }

    function sku() {
        return el('stepsku').value || 'stepdemo';
    }

    /* GET /steps with the SKU's keys, and the SKU's audit. */
    function refresh() {
        var s = sku();
        return Promise.all([call('GET', '/steps?sku=' + encodeURIComponent(s)),
            call('GET', '/stock/' + encodeURIComponent(s))]).then(function (res) {
            if (res[0].status !== 200 || !res[0].body) {
                refused(res[0]);
                return false;
            }
            take(res[0].body);
            last.audit = res[1].status === 200 ? res[1].body : null;
            render();
            return true;
        });
    }

    function take(body) {
        last.steps = body.steps || [];
        last.redis = body.redis || {};
        last.now = body.now_us;
    }

    function stepOf(b) {
        for (var i = 0; i < last.steps.length; i++)
            if (last.steps[i].id === b.id) return last.steps[i];
        return null;
    }

    function byName(name) {
        for (var i = 0; i < buyers.length; i++)
            if (buyers[i].name === name) return buyers[i];
        return null;
    }

    /* ---- buyers ---- */

    function addBuyer(mode, extra) {
        var name = NAMES.charAt(buyers.length);
        if (!name) return Promise.resolve(null);
        var floor = 0;
        last.steps.forEach(function (s) { if (s.id > floor) floor = s.id; });
        var q = new URLSearchParams({sku: sku(), user: name, step: '1'});
        var lease = el('steplease').value;
        extra = extra || {};
        if (lease && extra.lease_ms === undefined && mode !== 'none' && mode !== 'mutex' &&
            mode !== 'lua')
            q.set('lease_ms', lease);
        if (extra.wait_ms === undefined && mode !== 'lua') q.set('wait_ms', '30000');
        Object.keys(extra).forEach(function (k) { q.set(k, String(extra[k])); });
        var b = {name: name, mode: mode, id: null, reply: null, lastStage: null};
        buyers.push(b);
        /* the purchase's own reply comes when it is done */
        call('POST', '/miaosha/' + encodeURIComponent(mode) + '?' + q.toString()).then(function (r) {
            b.reply = r;
            if (b.id === null && refused(r)) {
                buyers.splice(buyers.indexOf(b), 1);
                render();
                return;
            }
            refresh();
        });
        /* its id: the newest step with its name */
        var tries = 0;
        function find() {
            return call('GET', '/steps?sku=' + encodeURIComponent(sku())).then(function (r) {
                if (r.status === 200 && r.body) {
                    take(r.body);
                    r.body.steps.forEach(function (s) {
                        if (s.user === name && s.id > floor && s.sku === sku()) b.id = s.id;
                    });
                }
                if (b.id !== null || b.reply || ++tries > 50) return b;
                return new Promise(function (ok) { setTimeout(ok, 100); }).then(find);
            });
        }
        return find().then(function () {
            if (b.id !== null) {
                b.lastStage = 'start';
                say('added', [name, mode]);
            }
            render();
            startPolling();
            return b;
        });
    }

    function drive(b, verb, byHand) {
        if (!b || b.id === null) return Promise.resolve(null);
        /* a next pressed by hand that is the lesson's move plays it */
        var m = lesson && byHand && lesson.at < lesson.moves.length ? lesson.moves[lesson.at] : null;
        if (m && verb === 'next' && m[0] === b.name && (m[1] === 'next' || m[1] === 'waits')) {
            lesson.at++;
            drawPlan();
        }
        return call('POST', '/steps/' + b.id + '/' + verb).then(function (r) {
            if (r.status !== 200 || !r.body) {
                refused(r);
                return null;
            }
            take(r.body);
            return call('GET', '/stock/' + encodeURIComponent(sku())).then(function (a) {
                last.audit = a.status === 200 ? a.body : last.audit;
                var st = r.body.step;
                b.lastStage = st.stage;
                tell(b, st);
                render();
                startPolling();
                return st;
            });
        });
    }

    function resetStock() {
        return call('PUT', '/stock/' + encodeURIComponent(sku()),
                    {stock: Number(el('stepstock').value) || 0}).then(function (r) {
            if (r.status !== 200) refused(r);
            return r.status === 200;
        });
    }

    /* Runs every buyer of the panel that is not done, then forgets them. */
    function clearBuyers() {
        var left = buyers.filter(function (b) {
            var s = stepOf(b);
            return b.id !== null && (!s || s.stage !== 'done');
        });
        buyers = [];
        lesson = null;
        return Promise.all(left.map(function (b) {
            return call('POST', '/steps/' + b.id + '/run?wait_ms=5000');
        }));
    }

    function preset(name) {
        if (busy) return Promise.resolve();
        var p = PRESETS[name];
        busy = true;
        pending = 0;
        return clearBuyers().then(resetStock).then(function (ok) {
            if (!ok) return null;
            el('stepmode').value = p.mode;
            var chain = Promise.resolve();
            p.buyers.forEach(function (extra) {
                chain = chain.then(function () { return addBuyer(p.mode, extra); });
            });
            return chain.then(function () {
                lesson = {name: name, moves: p.moves, at: 0};
                drawPlan();
                say('g_' + name, []);
                return refresh();
            });
        }).then(function () {
            busy = false;
            pump();
        }, function () {
            busy = false;
        });
    }

    /* "next move of the lesson": one more move to play; they are played
     * one after the other, each once the one before (or the preset) has
     * finished, so quick clicks are not lost. */
    function follow() {
        pending++;
        pump();
    }

    function pump() {
        if (busy || pending === 0) return;
        pending--;
        if (!lesson || lesson.at >= lesson.moves.length) {
            pending = 0;
            return;
        }
        busy = true;
        var free = function () {
            busy = false;
            pump();
        };
        play(lesson.moves[lesson.at]).then(function () {
            lesson.at++;
            drawPlan();
        }).then(free, free);
    }

    function play(m) {
        var b = byName(m[0]);
        var done;
        if (m[1] === 'next' || m[1] === 'waits') {
            done = drive(b, 'next');
        } else {
            /* wait for the server: a lease to run out, a buyer to arrive */
            done = new Promise(function (ok) {
                var tries = 0;
                (function check() {
                    refresh().then(function () {
                        var s = stepOf(b), k = keysOf(b.mode);
                        var there = m[1] === 'arrive' ? s && s.stage === m[2]
                            : k && k.value === null;
                        if (there || ++tries > 100) {
                            if (s) tell(b, s);
                            ok();
                        } else {
                            setTimeout(check, 100);
                        }
                    });
                })();
            });
        }
        return done;
    }

    function startPolling() {
        if (polling) return;
        polling = true;
        (function tick() {
            var live = buyers.some(function (b) {
                var s = stepOf(b);
                return b.id !== null && (!s || s.stage !== 'done');
            });
            if (!live || document.hidden) {
                polling = false;
                return;
            }
            refresh().then(function () {
                /* a buyer that arrived by itself (its lock came free) */
                buyers.forEach(function (b) {
                    var s = stepOf(b);
                    if (s && b.lastStage !== null && s.stage !== b.lastStage && !s.waiting) {
                        b.lastStage = s.stage;
                        tell(b, s);
                    }
                });
            }, function () {}).then(function () { setTimeout(tick, POLL_MS); });
        })();
    }

    /* ---- what happened, in one sentence ---- */

    function say(key, args, bad) {
        said = {key: key, args: args, bad: bad};
        var v = TEXT[lang][key] || TEXT.en[key];
        var box = el('stepsay');
        box.textContent = typeof v === 'function' ? v.apply(null, args) : (v || key);
        box.className = bad ? 'bad' : '';
    }

    function nameOf(id) {
        for (var i = 0; i < buyers.length; i++)
            if (buyers[i].id === id) return buyers[i].name;
        return null;
    }

    function keysOf(mode) {
        var k = last.redis[sku()];
        return k && k.locks ? k.locks[mode] || null : null;
    }

    function tell(b, s) {
        var others = last.steps.filter(function (o) {
            return o.id !== s.id && o.sku === s.sku && nameOf(o.id) !== null;
        });
        if (s.abandoned) return say('abandoned', [b.name], true);
        if (s.waiting && s.stage === 'start') {
            var h = others.filter(function (o) { return o.holds_lock && o.mode === s.mode; })[0];
            return say('waits', [b.name, h ? nameOf(h.id) : null]);
        }
        switch (s.stage) {
        case 'start': return say('atStart', [b.name]);
        case 'locked':
            if (s.mode === 'none') return say('lockedNone', [b.name]);
            if (s.mode === 'mutex') return say('lockedMutex', [b.name]);
            return say('locked', [b.name, s.lease_left_ms]);
        case 'read':
            var same = others.filter(function (o) {
                return o.read === s.read && o.written === null && o.stage !== 'done';
            })[0];
            return same ? say('readSame', [b.name, s.read, nameOf(same.id)])
                : say('read', [b.name, s.read]);
        case 'written':
            if (s.error === 'fenced_out') return say('fenced', [b.name], true);
            if (s.written === null) return say('notWritten', [b.name, s.error || '?'], true);
            var twin = others.filter(function (o) { return o.written === s.written; })[0];
            return twin ? say('wroteSame', [b.name, s.written, nameOf(twin.id)], true)
                : say('wrote', [b.name, s.written]);
        case 'released':
            return s.lock_lost ? say('releasedLost', [b.name], true) : say('released', [b.name]);
        case 'done':
            if (s.mode === 'lua') return say('doneLua', [b.name, String(s.status)]);
            return say('done', [b.name, String(s.status), s.error], s.status !== 200);
        }
    }

    /* ---- drawing ---- */

    function drawPlan() {
        var box = el('stepplanbox'), ol = el('stepplan');
        box.hidden = !lesson;
        ol.textContent = '';
        if (!lesson) return;
        lesson.moves.forEach(function (m, i) {
            var li = document.createElement('li');
            var w = TEXT[lang];
            li.textContent = (i + 1) + '. ' + (m[1] === 'next' ? w.m_next(m[0], m[2]) :
                m[1] === 'waits' ? w.m_waits(m[0]) : m[1] === 'lease' ? w.m_lease(m[0]) :
                w.m_arrive(m[0]));
            li.className = i < lesson.at ? 'did' : i === lesson.at ? 'now' : '';
            ol.appendChild(li);
        });
        el('stepfollow').disabled = lesson.at >= lesson.moves.length;
    }

    function cellOf(tr, field) {
        var td = tr.querySelector('td[data-field="' + field + '"]');
        if (!td) {
            td = document.createElement('td');
            td.setAttribute('data-field', field);
            tr.appendChild(td);
        }
        return td;
    }

    function show(v) {
        return v === null || v === undefined ? t('none') : String(v);
    }

    function buyerRow(b) {
        if (b.row) return b.row;
        var tr = document.createElement('tr');
        tr.setAttribute('data-buyer', b.name);
        ['buyer', 'mode', 'stage', 'read', 'written', 'lock', 'lease', 'reply']
            .forEach(function (f) { cellOf(tr, f); });
        var td = document.createElement('td');
        [['next', 'data-next'], ['run', 'data-run']].forEach(function (v) {
            var btn = document.createElement('button');
            btn.type = 'button';
            btn.setAttribute(v[1], b.name);
            btn.addEventListener('click', function () { drive(b, v[0], true); });
            td.appendChild(btn);
        });
        tr.appendChild(td);
        b.row = tr;
        return tr;
    }

    function render() {
        var body = el('buyerrows');
        body.textContent = '';
        buyers.forEach(function (b) {
            var tr = buyerRow(b), s = stepOf(b);
            body.appendChild(tr);
            cellOf(tr, 'buyer').textContent = b.name;
            cellOf(tr, 'mode').textContent = b.mode;
            var stage = s ? s.stage : (b.reply ? 'done' : '…');
            cellOf(tr, 'stage').textContent = stage + (s && s.waiting ? ' ⏳' : '');
            tr.className = s && s.waiting ? 'waiting' : '';
            cellOf(tr, 'read').textContent = show(s && s.read);
            cellOf(tr, 'written').textContent = show(s && s.written);
            /* none's "lock" holds nothing: the lesson is that it keeps nobody out */
            cellOf(tr, 'lock').textContent = s && s.holds_lock ?
                t(b.mode === 'none' ? 'nothing' : 'holds') : t('none');
            cellOf(tr, 'lease').textContent = show(s && s.lease_left_ms);
            var rep = b.reply || (s && s.status ? {status: s.status, body: {error: s.error}} : null);
            cellOf(tr, 'reply').textContent = rep ? String(rep.status) +
                (rep.body && rep.body.error ? ' ' + rep.body.error : '') : t('none');
            var btns = tr.querySelectorAll('button');
            btns[0].textContent = t('next');
            btns[1].textContent = t('run');
            for (var i = 0; i < btns.length; i++) btns[i].disabled = !s || s.stage === 'done';
        });
        drawKeys();
        drawLanes();
    }

    function drawKeys() {
        var k = last.redis[sku()] || null, a = last.audit;
        var cell = function (f) { return document.querySelector('#stepkeys td[data-field="' + f + '"]'); };
        cell('k-stock').textContent = show(k && k.stock);
        cell('k-sold').textContent = show(k && k.sold);
        cell('k-oversold').textContent = show(a && a.oversold);
        cell('k-oversold').className = a && a.oversold > 0 ? 'bad' : '';
        var mode = el('stepmode').value, l = keysOf(mode);
        if (!l) {
            cell('k-lock').textContent = t('nolock');
            cell('k-pttl').textContent = t('none');
        } else {
            var v = l.value === null ? t('absent') : l.value;
            var holder = null;
            last.steps.forEach(function (s) {
                if (s.holds_lock && s.mode === mode && s.sku === sku()) holder = nameOf(s.id);
            });
            cell('k-lock').textContent = (v.length > 18 ? v.slice(0, 16) + '…' : v) +
                (l.value !== null && holder ? ' (' + holder + ')' : '');
            cell('k-pttl').textContent = l.pttl_ms === null || l.pttl_ms < 0 && l.value === null ?
                t('none') : String(l.pttl_ms);
        }
        cell('k-fence').textContent = show(k && k.fence_hwm);
    }

    /* Each buyer's lane, as the trace renderer draws a purchase: the
     * steps carry the trace's field names. */
    function drawLanes() {
        var box = el('steplanes');
        if (!window.miaoshaTimeline) return;
        var recs = [];
        buyers.forEach(function (b) {
            var s = stepOf(b);
            if (!s) return;
            recs.push({seq: s.id, request_id: s.id, instance: 'stepped', worker: s.id,
                user: b.name, mode: s.mode, received_us: s.received_us,
                wait_start_us: s.wait_start_us, acquired_us: s.acquired_us, read_us: s.read_us,
                committed_us: s.committed_us, released_us: s.released_us,
                responded_us: s.responded_us, stock_read: s.read, stock_written: s.written,
                fence: s.fence, lock_lost: s.lock_lost, deleted_other_lock: s.deleted_other_lock,
                status: s.status === null ? s.stage : s.status, error: s.error});
        });
        box.textContent = '';
        if (!recs.length) return;
        var initial = last.audit ? last.audit.initial : undefined;
        window.miaoshaTimeline.render(box, recs, {lang: lang, now: last.now, stock: initial});
    }

    /* ---- start ---- */

    MODES.forEach(function (m) {
        var o = document.createElement('option');
        o.value = m;
        o.textContent = m; /* mode names stay as in the URLs */
        el('stepmode').appendChild(o);
    });
    Object.keys(PRESETS).forEach(function (name) {
        var btn = document.createElement('button');
        btn.type = 'button';
        btn.setAttribute('data-preset', name);
        btn.addEventListener('click', function () { preset(name); });
        el('steppresets').appendChild(btn);
    });
    el('stepadd').addEventListener('click', function () { addBuyer(el('stepmode').value); });
    el('stepreset').addEventListener('click', function () {
        clearBuyers().then(resetStock).then(refresh);
    });
    el('stepfollow').addEventListener('click', follow);
    el('stepmode').addEventListener('change', function () { render(); });
    new MutationObserver(applyLang).observe(document.documentElement,
        {attributes: true, attributeFilter: ['lang']});
    applyLang();
    window.miaoshaSteps = {preset: preset, follow: follow}; /* for scripted lessons */
})();
