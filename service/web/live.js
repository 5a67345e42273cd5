/* live.js — the live page's script (GET / of miaosha-server; inlined into
 * live.html at build time).
 *
 * Once a second it reads the routes every client can read: /stats (per
 * mode p99, the mode list), /metrics (requests per mode and SKU), GET
 * /stock/{sku} for each SKU seen (the audit: sold, stock, oversold,
 * undersold) and the tail of GET /trace/{sku} for the latest trace. All of
 * them are answered from memory on the HTTP threads except /stock, which
 * runs on the admin pool, never on a purchase worker, so an open page takes
 * nothing from the buyers. Polls never overlap: the next starts a second
 * after the previous one ended, and none runs while the tab is hidden.
 *
 * Everything that came from a user (SKU, user, the server's texts) is put
 * into the page as text (textContent, setAttribute), never as HTML.
 *
 * The location's hash configures the page, so a link can prepare it:
 * #sku=S (the SKU of the controls and of the trace), #user=U, #lang=en|zh,
 * #trace=S (the SKU whose trace is drawn; default the busiest one) and
 * #buy=MODE (one purchase when the page opens: what the browser test uses).
 *
 * The table is grouped by SKU, because the audit is the SKU's, not the
 * mode's: one row per SKU with its audit (sold, stock, oversold,
 * undersold), and under it one row per mode that bought it (requests,
 * purchases/s, p99), which carries no audit of its own. A mode row can
 * never show the oversell of another mode that bought the same SKU; the
 * SKU's row names the modes it is shared by.
 *
 * Stable markers for tests: SKU rows <tr data-sku class="sku"> with cells
 * <td data-field="sku|modes|requests|rate|sold|stock|oversold|undersold">
 * (data-modes: how many modes bought it); mode rows <tr data-mode
 * data-sku> with <td data-field="mode|requests|rate|p99">. A SKU split into
 * stock buckets shows each bucket's stock from the audit on its row, in
 * <td data-field="buckets"> ("–" for a SKU in one). */
(function () {
    'use strict';

    var POLL_MS = 1000;
    var MAX_SKUS = 16; /* audits read per poll: the busiest SKUs */
    var TRACE_KEEP = 100; /* trace records drawn */
    var SINCE_MAX = 999999999999; /* /trace?since= of the header alone */
    /* The label /metrics gives the SKUs beyond its first 64 (and rejected
     * purchases of unknown SKUs): not a SKU, so no audit and no trace. */
    var OTHER = '_other';

    var TEXT = {
        en: {
            title: 'miaosha — live', cells: 'Per SKU, and the modes that bought it', mode: 'mode',
            sku: 'SKU', requests: 'requests', sold: 'sold', stock: 'stock', oversold: 'oversold',
            undersold: 'undersold', rate: 'purchases/s', p99: 'p99 (ms)',
            note: 'sold, stock, oversold and undersold are the SKU\'s audit (GET /stock), shown ' +
                'once, on the SKU\'s row; the modes that bought it are the rows under it. A SKU ' +
                'bought through several modes cannot tell which of them oversold: buy each mode ' +
                'on its own SKU (demo-none, demo-token, …). purchases/s counts the requests over ' +
                'the last update; p99 is the mode\'s latency since the server started. stock per ' +
                'bucket: each bucket\'s stock, for a SKU split into stock buckets.',
            buckets: 'stock per bucket',
            empty: 'No purchase yet: run a load (wrk, ab, miaosha-load) or press a button below.',
            controls: 'Buy and reset', user: 'user', buy: 'buy once:', newstock: 'stock',
            reset: 'reset stock', token: 'admin token', trace: 'Latest trace',
            updated: 'updated', down: 'server unreachable', inflight: 'in flight',
            shared: 'bought through several modes: this audit is all of theirs, it cannot ' +
                'tell which mode oversold', needsku: 'reset needs a SKU',
            needtoken: 'this server needs its admin token: type it and press reset again',
            badtoken: 'wrong admin token', notrace: 'no purchase traced yet',
            norenderer: 'the timeline renderer is not built into this server',
            traceleft: 'drawn: the last {k} of the {n} purchases this instance traced on this SKU; ' +
                'those it answered from its local sold-out flag (409 sold_out before any worker) ' +
                'are never traced',
            default_sku: '(server default)'
        },
        zh: {
            title: 'miaosha 秒杀 — 实时', cells: '按商品，及购买它的模式', mode: '模式', sku: '商品 SKU',
            requests: '请求', sold: '已售', stock: '库存', oversold: '超卖', undersold: '少卖',
            rate: '每秒购买', p99: 'p99（毫秒）', buckets: '各桶库存',
            note: '已售、库存、超卖、少卖是该商品的对账（GET /stock），只在商品那一行显示一次；' +
                '购买过它的模式列在它下面。一个商品被多个模式购买时，分不出是哪个模式超卖的：' +
                '每个模式请用自己的商品（demo-none、demo-token……）。每秒购买是最近一次刷新间隔内的' +
                '请求数；p99 是该模式自服务启动以来的延迟。各桶库存：库存分桶的商品每个桶的库存。',
            empty: '还没有购买：运行压测（wrk、ab、miaosha-load）或按下面的按钮。',
            controls: '购买与重置', user: '用户', buy: '买一件：', newstock: '库存',
            reset: '重置库存', token: '管理员令牌', trace: '最近的追踪',
            updated: '更新于', down: '连不上服务', inflight: '处理中',
            shared: '被多个模式购买：这份对账属于它们全体，分不出是哪个模式超卖的',
            needsku: '重置库存需要填写商品 SKU',
            needtoken: '该服务需要管理员令牌：填写后再按一次重置',
            badtoken: '管理员令牌不对', notrace: '还没有被追踪的购买',
            norenderer: '该服务没有内置时间线渲染器', default_sku: '（服务默认）',
            traceleft: '画出的是本实例在该商品上追踪到的 {n} 次购买中的最后 {k} 次；由本地售罄标记直接' +
                '回答的购买（在任何工作线程之前的 409 sold_out）从不追踪'
        }
    };

    var hash = new URLSearchParams(location.hash.slice(1));
    var lang = pickLang();
    var rows = {}; /* "mode sku" -> {mode, sku, requests, t, rate, tr} */
    var skuRows = {}; /* sku -> its <tr> */
    var modes = null;
    var trace = {sku: hash.get('trace') || '', since: null, header: null, records: [], drawn: -1};
    var last = {stats: null, audits: {}};
    var el = function (id) { return document.getElementById(id); };

    function pickLang() {
        var l = hash.get('lang');
        if (l !== 'en' && l !== 'zh') {
            try { l = localStorage.getItem('miaosha.lang'); } catch (e) { l = null; }
        }
        if (l !== 'en' && l !== 'zh')
            l = /^zh/i.test(navigator.language || '') ? 'zh' : 'en';
        return l;
    }

    function t(key) {
        return (TEXT[lang] && TEXT[lang][key]) || TEXT.en[key] || key;
    }

    function applyLang() {
        document.documentElement.lang = lang === 'zh' ? 'zh-CN' : 'en';
        document.title = t('title');
        var nodes = document.querySelectorAll('[data-i18n]');
        for (var i = 0; i < nodes.length; i++)
            nodes[i].textContent = t(nodes[i].getAttribute('data-i18n'));
        var b = document.querySelectorAll('#lang button');
        for (i = 0; i < b.length; i++)
            b[i].className = b[i].getAttribute('data-lang') === lang ? 'on' : '';
        el('sku').placeholder = t('default_sku');
        trace.drawn = -1;
        drawTrace();
    }

    function setLang(l) {
        lang = l;
        try { localStorage.setItem('miaosha.lang', l); } catch (e) { /* private mode */ }
        applyLang();
        if (last.stats) render();
    }

    /* ---- reading the server ---- */

    function get(path, asText) {
        return fetch(path, {cache: 'no-store'}).then(function (r) {
            return (asText ? r.text() : r.json().catch(function () { return null; }))
                .then(function (body) { return {status: r.status, body: body}; });
        });
    }

    function unescapeLabel(s) {
        return s.replace(/\\(.)/g, function (m, c) { return c === 'n' ? '\n' : c; });
    }

    /* The per (mode, SKU) request counters of the Prometheus text. */
    function parseMetrics(text) {
        var out = [];
        var re = /^miaosha_purchase_requests_total\{mode="([^"\\]*)",sku="((?:[^"\\]|\\.)*)"\} (\d+)$/gm;
        var m;
        while ((m = re.exec(text)) !== null)
            out.push({mode: m[1], sku: unescapeLabel(m[2]), requests: Number(m[3])});
        return out;
    }

    function poll() {
        if (document.hidden) {
            setTimeout(poll, POLL_MS);
            return;
        }
        Promise.all([get('/stats'), get('/metrics', true)]).then(function (res) {
            if (res[0].status !== 200 || !res[0].body) throw new Error('stats ' + res[0].status);
            last.stats = res[0].body;
            var now = performance.now();
            var seen = parseMetrics(res[1].body || '');
            var busiest = null, busiestDelta = 0, most = null;
            seen.forEach(function (c) {
                if (c.sku === OTHER) return;
                if (!most || c.requests > most.requests) most = c;
                var key = c.mode + ' ' + c.sku;
                var row = rows[key];
                if (!row) row = rows[key] = {mode: c.mode, sku: c.sku, requests: c.requests, t: now, rate: 0};
                else {
                    var dt = (now - row.t) / 1000;
                    var delta = c.requests - row.requests;
                    row.rate = dt > 0 && delta >= 0 ? delta / dt : 0;
                    if (delta > busiestDelta) { busiestDelta = delta; busiest = c.sku; }
                    row.requests = c.requests;
                    row.t = now;
                }
            });
            if (!hash.get('trace') && busiest !== null && busiest !== trace.sku)
                setTraceSku(busiest);
            if (!trace.sku && most) setTraceSku(most.sku);
            return readAudits();
        }).then(function () {
            render();
            setStatus(false);
            return pollTrace();
        }).catch(function () {
            setStatus(true);
        }).then(function () {
            setTimeout(poll, POLL_MS);
        });
    }

    function readAudits() {
        var skus = {};
        Object.keys(rows).map(function (k) { return rows[k]; })
            .sort(function (a, b) { return b.requests - a.requests; })
            .forEach(function (r) { if (r.sku !== OTHER) skus[r.sku] = true; });
        var list = Object.keys(skus).slice(0, MAX_SKUS);
        return Promise.all(list.map(function (s) {
            return get('/stock/' + encodeURIComponent(s)).then(function (r) {
                if (r.status === 200 && r.body) last.audits[s] = r.body;
            }, function () { /* keep the last audit */ });
        }));
    }

    function setTraceSku(s) {
        trace.sku = s;
        trace.since = null;
        trace.header = null;
        trace.records = [];
        trace.drawn = -1;
        el('tracesku').textContent = s;
    }

    /* The tail of the trace, at most TRACE_KEEP records a poll: the header
     * alone first (its last_seq), then what came after what we hold. */
    function pollTrace() {
        if (!trace.sku) return drawTrace();
        var base = '/trace/' + encodeURIComponent(trace.sku) + '?since=';
        return get(base + SINCE_MAX, true).then(function (r) {
            if (r.status !== 200) return null;
            var head = JSON.parse(r.body.split('\n')[0]);
            if (trace.since !== null && head.last_seq < trace.since) setTraceSku(trace.sku);
            if (trace.since !== null && head.last_seq === trace.since) return null;
            var from = Math.max(trace.since || 0, head.last_seq - TRACE_KEEP, 0);
            return get(base + from, true);
        }).then(function (r) {
            if (!r || r.status !== 200) return;
            var lines = r.body.split('\n').filter(function (l) { return l; }).map(JSON.parse);
            trace.header = lines[0];
            trace.records = trace.records.concat(lines.slice(1)).slice(-TRACE_KEEP);
            trace.since = trace.header.last_seq;
        }).catch(function () { /* drawn again next poll */ }).then(drawTrace);
    }

    function drawTrace() {
        var box = el('timeline');
        if (trace.drawn === trace.since && box.firstChild) return;
        trace.drawn = trace.since;
        box.textContent = '';
        var note = document.createElement('p');
        note.className = 'note';
        if (!window.miaoshaTimeline || typeof window.miaoshaTimeline.render !== 'function') {
            note.textContent = t('norenderer');
            box.appendChild(note);
            return;
        }
        if (!trace.header || !trace.records.length) {
            note.textContent = t('notrace');
            box.appendChild(note);
            return;
        }
        try {
            window.miaoshaTimeline.render(box, [trace.header].concat(trace.records), {lang: lang});
            var left = document.createElement('p');
            left.className = 'note';
            left.id = 'traceleft';
            left.setAttribute('data-drawn', String(trace.records.length));
            left.setAttribute('data-traced', String(trace.header.last_seq));
            left.textContent = t('traceleft').replace('{k}', String(trace.records.length))
                .replace('{n}', String(trace.header.last_seq));
            box.appendChild(left);
        } catch (e) {
            note.textContent = String(e);
            box.appendChild(note);
        }
    }

    /* ---- drawing ---- */

    function setStatus(down) {
        var s = el('status');
        s.className = down ? 'down' : '';
        if (down) {
            s.textContent = t('down');
            return;
        }
        var st = last.stats;
        s.textContent = t('updated') + ' ' + new Date().toLocaleTimeString() + ' · ' +
            st.instance + ' · ' + t('inflight') + ' ' + st.inflight;
    }

    function cell(tr, field) {
        var td = tr.querySelector('td[data-field="' + field + '"]');
        if (!td) {
            td = document.createElement('td');
            td.setAttribute('data-field', field);
            tr.appendChild(td);
        }
        return td;
    }

    function newRow(attrs, fields) {
        var tr = document.createElement('tr');
        Object.keys(attrs).forEach(function (k) { tr.setAttribute(k, attrs[k]); });
        fields.forEach(function (f) { cell(tr, f); });
        return tr;
    }

    function byMode(x, y) {
        return x.mode < y.mode ? -1 : x.mode > y.mode ? 1 : 0;
    }

    /* One row per SKU with its audit, its modes' rows under it. */
    function render() {
        var st = last.stats;
        if (st && st.modes && !modes) buildButtons(Object.keys(st.modes));
        var bySku = {};
        Object.keys(rows).forEach(function (k) {
            var r = rows[k];
            (bySku[r.sku] = bySku[r.sku] || []).push(r);
        });
        var body = el('rows');
        var skus = Object.keys(bySku).sort();
        skus.forEach(function (s) {
            var list = bySku[s].sort(byMode);
            var tr = skuRows[s];
            if (!tr) {
                tr = skuRows[s] = newRow({'data-sku': s, 'class': 'sku'},
                    ['sku', 'modes', 'requests', 'rate', 'p99', 'sold', 'stock', 'oversold',
                        'undersold', 'buckets']);
                cell(tr, 'sku').textContent = s;
            }
            body.appendChild(tr); /* keeps the sorted order, its modes under it */
            var requests = 0, rate = 0;
            list.forEach(function (r) { requests += r.requests; rate += r.rate; });
            var shared = list.length > 1;
            tr.setAttribute('data-modes', String(list.length));
            var mc = cell(tr, 'modes');
            mc.textContent = list.map(function (r) { return r.mode; }).join(', ');
            mc.className = shared ? 'shared' : '';
            mc.title = shared ? t('shared') : '';
            cell(tr, 'requests').textContent = String(requests);
            cell(tr, 'rate').textContent = rate.toFixed(1);
            var a = last.audits[s];
            ['sold', 'stock', 'oversold', 'undersold'].forEach(function (f) {
                var td = cell(tr, f);
                td.textContent = a ? String(a[f]) : '–';
                td.className = '';
            });
            if (a) {
                cell(tr, 'oversold').className = a.oversold > 0 ? 'bad' : (a.sold > 0 ? 'good' : '');
                cell(tr, 'undersold').className = a.undersold > 0 ? 'bad' : '';
            }
            cell(tr, 'buckets').textContent = a && a.buckets ?
                a.buckets.map(function (b) { return String(b.stock); }).join(' · ') : '–';
            list.forEach(function (r) {
                if (!r.tr) {
                    r.tr = newRow({'data-mode': r.mode, 'data-sku': r.sku},
                        ['sku', 'mode', 'requests', 'rate', 'p99']);
                    cell(r.tr, 'mode').textContent = r.mode;
                    var rest = document.createElement('td');
                    rest.colSpan = 5;
                    rest.className = 'ofsku';
                    r.tr.appendChild(rest);
                }
                body.appendChild(r.tr);
                cell(r.tr, 'requests').textContent = String(r.requests);
                cell(r.tr, 'rate').textContent = r.rate.toFixed(1);
                var m = st && st.modes && st.modes[r.mode];
                cell(r.tr, 'p99').textContent = m ? m.latency_ms.p99.toFixed(1) : '–';
            });
        });
        el('empty').hidden = skus.length > 0;
    }

    /* ---- controls ---- */

    function logLine(parts, bad) {
        var li = document.createElement('li');
        li.setAttribute('data-status', bad ? 'error' : 'ok');
        li.textContent = new Date().toLocaleTimeString() + ' ' + parts.join(' ');
        var log = el('log');
        log.insertBefore(li, log.firstChild);
        while (log.children.length > 20) log.removeChild(log.lastChild);
        return li;
    }

    function replyText(r) {
        var b = r.body || {};
        if (b.ok) return 'order ' + b.order_id + ' stock_left ' + b.stock_left +
            (b.bucket != null ? ' bucket ' + b.bucket : '');
        return (b.error || '') + (b.detail ? ': ' + b.detail : '');
    }

    function buy(mode) {
        var sku = el('sku').value, user = el('user').value;
        var q = new URLSearchParams();
        if (sku) q.set('sku', sku);
        if (user) q.set('user', user);
        var qs = q.toString();
        return fetch('/miaosha/' + encodeURIComponent(mode) + (qs ? '?' + qs : ''),
                     {method: 'POST', cache: 'no-store'})
            .then(function (r) {
                return r.json().catch(function () { return null; })
                    .then(function (b) { return {status: r.status, body: b}; });
            })
            .then(function (r) {
                var li = logLine([mode, 'sku=' + (sku || t('default_sku')), 'user=' + (user || '-'),
                                  '→', String(r.status), replyText(r)], r.status !== 200);
                li.setAttribute('data-mode', mode);
            }, function (e) { logLine([mode, '→', String(e)], true); });
    }

    function reset() {
        var sku = el('sku').value;
        if (!sku) {
            logLine([t('needsku')], true);
            return;
        }
        var headers = {'Content-Type': 'application/json'};
        var token = el('token').value;
        if (token) headers.Authorization = 'Bearer ' + token;
        var n = Number(el('stock').value);
        fetch('/stock/' + encodeURIComponent(sku), {method: 'PUT', headers: headers,
                                                    body: JSON.stringify({stock: n})})
            .then(function (r) {
                return r.json().catch(function () { return null; })
                    .then(function (b) { return {status: r.status, body: b}; });
            })
            .then(function (r) {
                if (r.status === 401) el('tokenbox').hidden = false;
                var why = r.status === 401 ? t('needtoken') : r.status === 403 ? t('badtoken')
                    : replyText(r);
                if (r.status === 200) why = 'stock ' + r.body.stock;
                logLine([t('reset'), 'sku=' + sku, '→', String(r.status), why], r.status !== 200);
                if (r.status === 200) {
                    delete last.audits[sku];
                    setTraceSku(trace.sku);
                }
            }, function (e) { logLine([t('reset'), '→', String(e)], true); });
    }

    function buildButtons(list) {
        modes = list;
        var box = el('buttons');
        box.textContent = '';
        list.forEach(function (m) {
            var b = document.createElement('button');
            b.type = 'button';
            b.textContent = m; /* mode names stay as in the URLs */
            b.setAttribute('data-buy', m);
            b.addEventListener('click', function () { buy(m); });
            box.appendChild(b);
        });
    }

    /* ---- start ---- */

    var langButtons = document.querySelectorAll('#lang button');
    for (var i = 0; i < langButtons.length; i++) {
        langButtons[i].addEventListener('click', function (ev) {
            setLang(ev.currentTarget.getAttribute('data-lang'));
        });
    }
    el('reset').addEventListener('click', reset);
    el('sku').value = hash.get('sku') || '';
    el('user').value = hash.get('user') || '';
    if (trace.sku) el('tracesku').textContent = trace.sku;
    applyLang();
    buildButtons(['none', 'mutex', 'setnx', 'token', 'reentrant', 'lua']);
    modes = null; /* rebuilt from /stats, which lists what this server offers */
    var first = hash.get('buy');
    (first ? buy(first) : Promise.resolve()).then(poll);
})();
