/* web/timeline.js — the purchase timeline of miaosha, drawn as inline SVG.
 *
 * One self-contained script (no external assets, works from file://),
 * compiled into miaosha-load (its --timeline and matrix pages) and
 * miaosha-server (the live page). It exposes
 *
 *   window.miaoshaTimeline.render(container, records, opts) -> summary
 *
 * records: the parsed lines of GET /trace/{sku} (JSON Lines), exactly as
 * the service writes them, of one or several instances; header lines
 * ({"header":true,...}) give each instance's clock anchor and are
 * otherwise skipped. opts (all optional):
 *   lang       'en' (default) or 'zh'
 *   stock      the stock the burst started from (the audit's `initial`)
 *   stockLeft  the stock counter after the burst (the audit's `stock`)
 *   buckets    for a SKU split into stock buckets: the audit's `buckets`,
 *              [{initial, stock}, ...], each bucket's start and end
 *              (records then name their `bucket`)
 *   order      'worker' (default) or 'value': lanes grouped by instance and
 *              worker, or by the stock value the sale read
 *   onlySales  true: hide the purchases that sold nothing (and had no lock
 *              mishap)
 *   now        the time, on the records' own clock (µs), up to which the
 *              purchases still running (no responded_us) are drawn: a page
 *              that draws purchases as they go (the live page's stepped
 *              buyers); ignored when header lines put the records on the
 *              wall clock
 * Without stock / stockLeft the highest value a sale read and the value the
 * last sale wrote stand in. order and onlySales are where the controls above
 * the chart start; a second render into the same container keeps what the
 * user chose there.
 *
 * What it draws: one lane per purchase, grouped by instance and worker;
 * the lock wait (class "wait"; never for a mode that takes no lock: none,
 * lua), the lock-held span (without a lock: read to commit), the
 * value read and the value written; every oversold unit (one element of
 * class "oversold" each) together with the purchases that read the same
 * stock value (class "same-read"); a release that deleted another holder's
 * lock (setnx; class "deleted-other", the victim "lock-deleted"); a holder
 * that got in while an earlier holder whose lease ran out still worked
 * (token; class "lease-intruder"); a write the store refused because a
 * newer holder's fencing token had passed it (fenced: a 409 `fenced_out`,
 * one element of class "fenced-out" each). Hover or click a lane: the side
 * panel shows that request's trace.
 *
 * How oversold units are counted (so that they equal the audit's
 * `oversold` = sold - (initial - stock left)): every sale wrote
 * read - 1, so the values the counter ever held form the range from its
 * lowest to `initial`, and every value v in (stock left, initial] was read
 * by at least one sale. One sale per such v took a real unit; every other
 * sale is oversold: the other readers of v, and all readers of values at or
 * below the final counter (their write was overwritten by a stale one).
 * Exact when the trace holds every sale of the burst. A SKU split into
 * stock buckets is counted bucket by bucket: each bucket is a counter of
 * its own, whose values repeat the others' (bucket 2 reading 5 is not
 * bucket 3 reading 5), with its own initial and stock left.
 *
 * Everything taken from the records is put in the page with textContent
 * or setAttribute, never parsed as markup. */
(function (global) {
    'use strict';

    var SVGNS = 'http://www.w3.org/2000/svg';

    var WORDS = {
        en: {
            title: 'Purchase timeline',
            purchases: 'purchases',
            sold: 'sold',
            oversoldUnits: 'oversold units',
            deleted: 'releases that deleted another holder\'s lock',
            intruders: 'holders that got in after a lease ran out',
            fencedOuts: 'stale writes refused (fenced_out)',
            instance: 'instance',
            worker: 'worker',
            read: 'read',
            wrote: 'wrote',
            wait: 'waiting for the lock',
            held: 'lock held (no lock: read to commit)',
            lost: 'lock lost (lease ran out while working)',
            sameRead: 'read the same stock value as an oversold sale',
            oversold: 'oversold unit',
            deletedOther: 'release deleted another holder\'s lock',
            lockDeleted: 'its lock was deleted by another holder',
            intruder: 'got the lock while the previous holder still worked',
            fencedOut: 'write refused by the fence (fenced_out)',
            ms: 'ms',
            panelHint: 'Hover or click a purchase to see its trace.',
            none: 'No purchases in this trace.',
            incomplete: 'Some records were overwritten in the ring: counts may be short.',
            readBy: 'stock value read by',
            sales: 'sales',
            onlySales: 'only sales and lock mishaps',
            lanes: 'lanes',
            byWorker: 'by instance and worker',
            byValue: 'by the stock value read',
            bucket: 'bucket',
            noSale: 'no sale'
        },
        zh: {
            title: '购买时间线',
            purchases: '次购买',
            sold: '售出',
            oversoldUnits: '超卖件数',
            deleted: '误删他人锁的释放',
            intruders: '租约过期后进入的持有者',
            fencedOuts: '被拒绝的过期写入（fenced_out）',
            instance: '实例',
            worker: '工作线程',
            read: '读到',
            wrote: '写入',
            wait: '等锁',
            held: '持锁（无锁：读到提交）',
            lost: '锁丢失（业务未完租约已过期）',
            sameRead: '与超卖的购买读到同一库存值',
            oversold: '超卖的一件',
            deletedOther: '释放时误删了他人的锁',
            lockDeleted: '锁被他人误删',
            intruder: '前一持有者仍在执行时拿到了锁',
            fencedOut: '写入被围栏拒绝（fenced_out）',
            ms: '毫秒',
            panelHint: '鼠标悬停或点击一次购买，查看它的追踪记录。',
            none: '追踪中没有购买记录。',
            incomplete: '环形缓冲区中部分记录已被覆盖：计数可能偏少。',
            readBy: '读到该库存值的售出',
            sales: '次售出',
            onlySales: '只看售出和锁异常',
            lanes: '泳道',
            byWorker: '按实例和工作线程',
            byValue: '按读到的库存值',
            bucket: '桶',
            noSale: '未售出'
        }
    };

    var POINTS = ['received_us', 'wait_start_us', 'acquired_us', 'read_us', 'committed_us',
        'released_us', 'responded_us'];

    /* The modes that take no lock (the URL's names): `none`, whose acquire
     * and release do nothing (the service still stamps wait_start,
     * acquired and released around them), and `lua`, one atomic script.
     * Their lanes get no lock-wait bar, and their span is read to commit,
     * not a lock held. */
    var NO_LOCK = {none: true, lua: true};

    var CSS = [
        '.mtl{font:12px/1.35 system-ui,"Noto Sans CJK SC","WenQuanYi Micro Hei",sans-serif;color:#222}',
        '.mtl-summary{margin:4px 0 6px}',
        '.mtl-summary b{font-weight:600}',
        '.mtl-note{color:#a33;margin:2px 0}',
        '.mtl-controls{margin:4px 0}',
        '.mtl-legend span{display:inline-block;margin-right:12px}',
        '.mtl-legend i{display:inline-block;width:14px;height:8px;margin-right:4px;vertical-align:middle}',
        '.mtl-body{display:flex;align-items:flex-start;gap:8px}',
        '.mtl-chart{overflow:auto;max-height:80vh;border:1px solid #ddd;flex:1 1 auto}',
        '.mtl-panel{flex:0 0 300px;border:1px solid #ddd;padding:6px;max-height:80vh;overflow:auto;' +
            'font-family:ui-monospace,monospace;font-size:11px;white-space:pre-wrap;word-break:break-all}',
        '.mtl svg text{font-size:10px}',
        '.mtl .lane:hover rect.bg,.mtl .lane.pick rect.bg{fill:#eef4ff}',
        '.mtl .same-read rect.bg{fill:#fff0f0}',
        '.mtl.focus .same-read.hot rect.bg{fill:#ffd6d6}',
        '.mtl .oversold{fill:#d00;stroke:#600}',
        '.mtl .fenced-out{fill:#088;stroke:#033}',
        '.mtl .lock-deleted rect.held{stroke:#909;stroke-width:2}',
        '.mtl .link{stroke:#909;stroke-width:1.2;stroke-dasharray:3 2;fill:none}',
        '.mtl .link.lease{stroke:#e67300}'
    ].join('\n');

    function words(lang) {
        return WORDS[lang] || WORDS.en;
    }

    function el(name, attrs, text) {
        var e = document.createElementNS(SVGNS, name);
        for (var k in attrs)
            if (Object.prototype.hasOwnProperty.call(attrs, k))
                e.setAttribute(k, String(attrs[k]));
        if (text != null)
            e.textContent = String(text);
        return e;
    }

    function html(name, cls, text) {
        var e = document.createElement(name);
        if (cls)
            e.className = cls;
        if (text != null)
            e.textContent = String(text);
        return e;
    }

    function num(v) {
        return typeof v === 'number' && isFinite(v);
    }

    /* The records, their times on one clock, and what they show. Exposed
     * (as miaoshaTimeline.analyse) so a page can print the counts alone. */
    function analyse(records, opts) {
        opts = opts || {};
        var anchors = {}, recs = [], incomplete = false, seen = {};
        (records || []).forEach(function (r) {
            if (!r || typeof r !== 'object')
                return;
            if (r.header) {
                if (num(r.anchor_wall_us) && num(r.anchor_mono_us))
                    anchors[String(r.instance)] = r.anchor_wall_us - r.anchor_mono_us;
                if (r.truncated)
                    incomplete = true;
                return;
            }
            if (!num(r.received_us))
                return;
            /* the same record twice (a trace given twice, overlapping
             * polls) would count its sale twice */
            var key = String(r.instance) + '\u0000' + r.seq;
            if (num(r.seq) && seen[key])
                return;
            seen[key] = true;
            recs.push(r);
        });
        /* Wall-clock only when every instance has its anchor: mixing clocks
         * would put two instances' lanes minutes apart. */
        var useWall = recs.length > 0 && recs.every(function (r) {
            return Object.prototype.hasOwnProperty.call(anchors, String(r.instance));
        });
        recs.forEach(function (r, i) {
            var off = useWall ? anchors[String(r.instance)] : 0;
            r._id = i;
            r._t = {};
            POINTS.forEach(function (p) {
                r._t[p] = num(r[p]) ? r[p] + off : null;
            });
            r._sold = num(r.stock_read) && num(r.stock_written);
            r._bucket = num(r.bucket) ? r.bucket : null;
            /* fenced: the store refused this holder's write (its token was
             * no longer the highest); nothing was written */
            r._fencedOut = r.error === 'fenced_out';
        });
        var fencedOut = recs.filter(function (r) { return r._fencedOut; }).length;

        var sold = recs.filter(function (r) { return r._sold; });
        var commitTime = function (r) {
            return r._t.committed_us != null ? r._t.committed_us :
                (r._t.responded_us != null ? r._t.responded_us : r._t.received_us);
        };
        sold.sort(function (a, b) { return commitTime(a) - commitTime(b) || a._id - b._id; });
        /* One counter, or one per stock bucket. */
        var counterOf = function (r) { return r._bucket != null ? 'b' + r._bucket : ''; };
        var counters = {};
        sold.forEach(function (r) {
            (counters[counterOf(r)] = counters[counterOf(r)] || []).push(r);
        });
        var initial = num(opts.stock) ? opts.stock : null;
        var left = num(opts.stockLeft) ? opts.stockLeft : null;
        var oversold = 0, sumInitial = 0, sumLeft = 0;
        Object.keys(counters).forEach(function (c) {
            var list = counters[c], b = list[0]._bucket;
            var given = b != null ? (opts.buckets || [])[b] : null;
            var init = b == null ? initial : given && num(given.initial) ? given.initial : null;
            var end = b == null ? left : given && num(given.stock) ? given.stock : null;
            if (init == null)
                init = Math.max.apply(null, list.map(function (r) { return r.stock_read; }));
            if (end == null)
                end = list[list.length - 1].stock_written;
            if (b == null) {
                initial = init;
                left = end;
            } else {
                sumInitial += init;
                sumLeft += end;
            }
            var byValue = {};
            list.forEach(function (r) {
                (byValue[r.stock_read] = byValue[r.stock_read] || []).push(r);
            });
            Object.keys(byValue).forEach(function (k) {
                var same = byValue[k], v = Number(k);
                var real = v > end && v <= init;
                same.forEach(function (r, i) {
                    r._oversold = !(real && i === 0);
                    if (r._oversold)
                        oversold++;
                });
                if (same.length > 1 || same.some(function (r) { return r._oversold; }))
                    same.forEach(function (r) { r._sameRead = b == null ? String(v) : b + ':' + v; });
            });
        });
        if (initial == null && Object.keys(counters).length)
            initial = num(opts.stock) ? opts.stock : sumInitial;
        if (left == null && Object.keys(counters).length)
            left = num(opts.stockLeft) ? opts.stockLeft : sumLeft;

        /* setnx: a release after the holder's lease ran out deleted the
         * lock of whoever got it next. token/reentrant: a holder whose lease
         * ran out (lock_lost) while a later one already held the lock. */
        var deleted = 0, intruders = 0, links = [];
        recs.forEach(function (x) {
            var a = x._t.acquired_us, rel = x._t.released_us;
            if (a == null || rel == null)
                return;
            var del = x.deleted_other_lock === true;
            var lost = x.lock_lost === true && !del;
            if (!del && !lost)
                return;
            if (del)
                deleted++;
            recs.forEach(function (y) {
                /* a bucket's lock is its own */
                if (y === x || y.mode !== x.mode || y._bucket !== x._bucket ||
                    y._t.acquired_us == null)
                    return;
                var ya = y._t.acquired_us, yr = y._t.released_us;
                if (!(ya > a && ya < rel))
                    return;
                if (del && (yr == null || yr > rel)) {
                    y._lockDeleted = true;
                    links.push({from: x, to: y, kind: 'deleted', at: rel});
                } else if (lost && !y._intruder) {
                    y._intruder = true;
                    intruders++;
                    links.push({from: x, to: y, kind: 'lease', at: ya});
                }
            });
        });

        var t0 = Infinity, t1 = -Infinity;
        recs.forEach(function (r) {
            POINTS.forEach(function (p) {
                var t = r._t[p];
                if (t != null) {
                    if (t < t0)
                        t0 = t;
                    if (t > t1)
                        t1 = t;
                }
            });
        });
        var now = num(opts.now) && !useWall ? opts.now : null;
        if (now != null && recs.length > 0 && now > t1)
            t1 = now;
        return {
            now: now,
            records: recs, sold: sold.length, oversold: oversold, deleted: deleted,
            intruders: intruders, fencedOut: fencedOut, links: links, t0: t0, t1: t1,
            initial: initial, left: left,
            incomplete: incomplete, wall: useWall
        };
    }

    function niceStep(spanMs, ticks) {
        var raw = spanMs / ticks, p = Math.pow(10, Math.floor(Math.log10(raw || 1)));
        var m = raw / p;
        return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
    }

    function ensureStyle() {
        if (document.getElementById('miaosha-timeline-style'))
            return;
        var s = document.createElement('style');
        s.id = 'miaosha-timeline-style';
        s.textContent = CSS;
        (document.head || document.documentElement).appendChild(s);
    }

    function describe(r, w) {
        var lines = [];
        var keys = ['instance', 'worker', 'seq', 'order_id', 'user', 'mode', 'status', 'error',
            'bucket', 'probes', 'hops', 'stock_read', 'stock_written', 'owner_token', 'release_status',
            'lock_lost', 'deleted_other_lock'];
        keys.forEach(function (k) {
            if (Object.prototype.hasOwnProperty.call(r, k))
                lines.push(k + ': ' + JSON.stringify(r[k]));
        });
        var base = r._t.received_us;
        POINTS.forEach(function (p) {
            if (r._t[p] != null)
                lines.push(p.replace(/_us$/, '') + ': +' + ((r._t[p] - base) / 1000).toFixed(3) +
                    ' ' + w.ms);
        });
        if (r._oversold)
            lines.push('** ' + w.oversold + ' (' + w.read + ' ' + r.stock_read + ')');
        if (r.deleted_other_lock === true)
            lines.push('** ' + w.deletedOther);
        if (r._lockDeleted)
            lines.push('** ' + w.lockDeleted);
        if (r._intruder)
            lines.push('** ' + w.intruder);
        if (r._fencedOut)
            lines.push('** ' + w.fencedOut);
        return lines.join('\n');
    }

    /* The chart and the side panel of a render, drawn again when a control
     * changes. */
    function drawBody(body, root, a, w, state, container) {
        while (body.firstChild)
            body.removeChild(body.firstChild);
        var chart = html('div', 'mtl-chart');
        var panel = html('div', 'mtl-panel', w.panelHint);
        body.appendChild(chart);
        body.appendChild(panel);

        /* Lanes: grouped by instance, then worker, each purchase in the order
         * it arrived; or grouped by the stock value the sale read (highest,
         * the first sold, on top), where an oversold value is a group of
         * more than one. Hidden with onlySales: what neither sold nor took
         * part in a lock mishap. */
        var recs = a.records.filter(function (r) {
            r._y = null;
            return !state.onlySales || r._sold || r.lock_lost === true ||
                r.deleted_other_lock === true || r._lockDeleted || r._intruder || r._fencedOut;
        });
        var byValue = state.order === 'value';
        var groupOf = function (r) {
            if (byValue)
                return r._sold ? 'v' + (r._bucket != null ? r._bucket + ':' : '') + r.stock_read : '-';
            return String(r.instance) + '\u0000' + r.worker;
        };
        recs.sort(function (x, y) {
            if (byValue) {
                if (x._sold !== y._sold)
                    return x._sold ? -1 : 1;
                if (x._sold && x._bucket !== y._bucket)
                    return (x._bucket || 0) - (y._bucket || 0);
                if (x._sold && x.stock_read !== y.stock_read)
                    return y.stock_read - x.stock_read;
                var cx = x._t.committed_us != null ? x._t.committed_us : x._t.received_us;
                var cy = y._t.committed_us != null ? y._t.committed_us : y._t.received_us;
                return cx - cy || x._id - y._id;
            }
            var xi = String(x.instance), yi = String(y.instance);
            if (xi !== yi)
                return xi < yi ? -1 : 1;
            if (x.worker !== y.worker)
                return x.worker - y.worker;
            return x._t.received_us - y._t.received_us || x._id - y._id;
        });
        var groupSize = {};
        recs.forEach(function (r) {
            var k = groupOf(r);
            groupSize[k] = (groupSize[k] || 0) + 1;
        });
        var LANE = 15, LABEL = 150, TOP = 22, RIGHT = 110;
        var width = Math.max(700, (container.clientWidth || 1100) - 330);
        var plot = width - LABEL - RIGHT;
        var span = Math.max(1, a.t1 - a.t0);
        var x = function (t) { return LABEL + (t - a.t0) / span * plot; };
        var rows = [], y = TOP, lastGroup = null;
        recs.forEach(function (r) {
            var g = groupOf(r);
            if (g !== lastGroup) {
                rows.push({group: r, key: g, y: y});
                y += LANE;
                lastGroup = g;
            }
            r._y = y;
            rows.push({rec: r, y: y});
            y += LANE;
        });
        var height = y + 6;
        var svg = el('svg', {xmlns: SVGNS, width: width, height: height,
            viewBox: '0 0 ' + width + ' ' + height, 'class': 'mtl-svg'});
        chart.appendChild(svg);

        var step = niceStep(span / 1000, 8);
        for (var ms = 0; ms <= span / 1000 + 1e-9; ms += step) {
            var tx = LABEL + ms * 1000 / span * plot;
            svg.appendChild(el('line', {x1: tx, x2: tx, y1: TOP - 4, y2: height, stroke: '#eee'}));
            svg.appendChild(el('text', {x: tx, y: 12, 'text-anchor': 'middle', fill: '#666'},
                (Math.round(ms * 1000) / 1000) + ' ' + w.ms));
        }

        var lanes = [];
        rows.forEach(function (row) {
            if (row.group) {
                var head;
                if (!byValue)
                    head = w.instance + ' ' + row.group.instance + ' · ' + w.worker + ' ' +
                        row.group.worker;
                else if (row.key === '-')
                    head = w.noSale;
                else
                    head = (row.group._bucket != null ? w.bucket + ' ' + row.group._bucket + ' · ' : '') +
                        w.read + ' ' + row.group.stock_read + ' · ' + groupSize[row.key] + ' ' +
                        w.sales;
                svg.appendChild(el('text', {x: 4, y: row.y + 11, 'font-weight': 'bold',
                    fill: byValue && groupSize[row.key] > 1 && row.key !== '-' ? '#b00' : '#333'},
                    head));
                return;
            }
            var r = row.rec, t = r._t, yy = row.y;
            var cls = ['lane'];
            if (r._sameRead != null)
                cls.push('same-read');
            if (r._lockDeleted)
                cls.push('lock-deleted');
            if (r._intruder)
                cls.push('lease-intruder');
            var g = el('g', {'class': cls.join(' '), 'data-id': r._id});
            if (r._sameRead != null)
                g.setAttribute('data-read', r._sameRead);
            if (r._bucket != null)
                g.setAttribute('data-bucket', String(r._bucket));
            g.appendChild(el('rect', {'class': 'bg', x: 0, y: yy, width: width, height: LANE,
                fill: 'transparent'}));
            var user = r.user != null ? String(r.user) : '-';
            if (user.length > 18)
                user = user.slice(0, 17) + '…';
            var who = user + ' · ' + r.status;
            g.appendChild(el('text', {x: 8, y: yy + 11, fill: '#444'}, who));
            /* a purchase still running is drawn up to now */
            var open = a.now != null ? a.now : t.received_us;
            var end = t.responded_us != null ? t.responded_us : open;
            g.appendChild(el('line', {x1: x(t.received_us), x2: x(end), y1: yy + 7.5, y2: yy + 7.5,
                stroke: '#bbb'}));
            var locks = !Object.prototype.hasOwnProperty.call(NO_LOCK, r.mode);
            if (locks && t.wait_start_us != null) {
                var we = t.acquired_us != null ? t.acquired_us :
                    (t.responded_us != null ? t.responded_us :
                        (a.now != null ? a.now : t.wait_start_us));
                g.appendChild(el('rect', {'class': 'wait', x: x(t.wait_start_us), y: yy + 4,
                    width: Math.max(1, x(we) - x(t.wait_start_us)), height: 7, fill: '#f2d98c'}));
            }
            var held = locks && t.acquired_us != null;
            var hs = held ? t.acquired_us : t.read_us;
            /* without a lock: read to commit, or to now while it still runs */
            var he = held ?
                (t.released_us != null ? t.released_us :
                    (t.responded_us != null ? t.responded_us : a.now)) :
                (t.committed_us != null ? t.committed_us :
                    (t.responded_us == null ? a.now : null));
            if (hs != null && he != null) {
                var lost = r.lock_lost === true;
                g.appendChild(el('rect', {'class': 'held', x: x(hs), y: yy + 2,
                    width: Math.max(1.5, x(he) - x(hs)), height: 11,
                    fill: lost ? '#e67300' : '#4a7bd0', 'fill-opacity': 0.85}));
            }
            if (t.read_us != null)
                g.appendChild(el('line', {x1: x(t.read_us), x2: x(t.read_us), y1: yy + 1,
                    y2: yy + 14, stroke: '#123'}));
            if (t.committed_us != null)
                g.appendChild(el('line', {x1: x(t.committed_us), x2: x(t.committed_us), y1: yy + 1,
                    y2: yy + 14, stroke: '#0a0', 'stroke-width': 2}));
            var label = '';
            if (num(r.stock_read))
                label = w.read + ' ' + r.stock_read;
            if (num(r.stock_written))
                label += ' → ' + w.wrote + ' ' + r.stock_written;
            if (r.error)
                label += (label ? ' · ' : '') + r.error;
            var lx = Math.max(x(end), he != null ? x(he) : 0) + 4;
            if (label)
                g.appendChild(el('text', {x: lx, y: yy + 11, fill: r._oversold ? '#b00' : '#333'},
                    label));
            if (r._oversold) {
                var cx = x(t.committed_us != null ? t.committed_us : end);
                var c = el('circle', {'class': 'oversold', cx: cx, cy: yy + 7.5, r: 4.5,
                    'data-read': r.stock_read});
                c.appendChild(el('title', {}, w.oversold + ': ' + w.read + ' ' + r.stock_read));
                g.appendChild(c);
            }
            if (r.deleted_other_lock === true && t.released_us != null) {
                var dx = x(t.released_us);
                var d = el('path', {'class': 'deleted-other', d: 'M' + (dx - 4) + ' ' + (yy + 3.5) +
                    'l8 8m0 -8l-8 8', stroke: '#909', 'stroke-width': 2.2});
                d.appendChild(el('title', {}, w.deletedOther));
                g.appendChild(d);
            }
            if (r._fencedOut) {
                /* where the refused write went: its commit attempt, else its
                 * release, else its answer */
                var fx = x(t.committed_us != null ? t.committed_us :
                    (t.released_us != null ? t.released_us : end));
                var f = el('path', {'class': 'fenced-out', d: 'M' + fx + ' ' + (yy + 2) + 'l5.5 5.5' +
                    'l-5.5 5.5l-5.5 -5.5z'});
                f.appendChild(el('title', {}, w.fencedOut));
                g.appendChild(f);
            }
            g.appendChild(el('title', {}, describe(r, w)));
            svg.appendChild(g);
            lanes.push(g);
        });

        a.links.forEach(function (l) {
            if (l.from._y == null || l.to._y == null)
                return;
            var lx = x(l.at);
            svg.appendChild(el('path', {'class': 'link' + (l.kind === 'lease' ? ' lease' : ''),
                d: 'M' + lx + ' ' + (l.from._y + 7.5) + 'L' + lx + ' ' + (l.to._y + 7.5)}));
        });

        var byId = {};
        a.records.forEach(function (r) { byId[r._id] = r; });
        var picked = null;
        function show(g, pin) {
            var r = byId[g.getAttribute('data-id')];
            if (!r)
                return;
            panel.textContent = describe(r, w);
            var v = g.getAttribute('data-read');
            lanes.forEach(function (o) {
                o.classList.toggle('hot', v != null && o.getAttribute('data-read') === v);
            });
            root.classList.toggle('focus', v != null);
            if (pin) {
                if (picked)
                    picked.classList.remove('pick');
                picked = g;
                g.classList.add('pick');
            }
        }
        lanes.forEach(function (g) {
            g.addEventListener('mouseenter', function () { show(g, false); });
            g.addEventListener('click', function () { show(g, true); });
        });
        body.addEventListener('mouseleave', function () {
            if (picked)
                show(picked, false);
        });
    }

    function render(container, records, opts) {
        opts = opts || {};
        var w = words(opts.lang);
        var a = analyse(records, opts);
        ensureStyle();
        while (container.firstChild)
            container.removeChild(container.firstChild);
        var root = html('div', 'mtl');
        root.setAttribute('data-oversold', String(a.oversold));
        root.setAttribute('data-sold', String(a.sold));
        root.setAttribute('data-fenced-out', String(a.fencedOut));
        container.appendChild(root);

        var sum = html('div', 'mtl-summary');
        var parts = [[w.purchases, a.records.length], [w.sold, a.sold],
            [w.oversoldUnits, a.oversold], [w.deleted, a.deleted], [w.intruders, a.intruders],
            [w.fencedOuts, a.fencedOut]];
        parts.forEach(function (p, i) {
            if (i > 0)
                sum.appendChild(document.createTextNode(' · '));
            sum.appendChild(document.createTextNode(p[0] + ': '));
            var b = html('b', null, p[1]);
            b.className = 'mtl-n' + i;
            sum.appendChild(b);
        });
        root.appendChild(sum);
        if (a.incomplete)
            root.appendChild(html('div', 'mtl-note', w.incomplete));

        var legend = html('div', 'mtl-legend');
        [['#f2d98c', w.wait], ['#4a7bd0', w.held], ['#e67300', w.lost], ['#ffd6d6', w.sameRead],
            ['#d00', w.oversold], ['#909', w.deletedOther], ['#088', w.fencedOut]].forEach(function (l) {
            var s = html('span'), i = html('i');
            i.style.background = l[0];
            s.appendChild(i);
            s.appendChild(document.createTextNode(l[1]));
            legend.appendChild(s);
        });
        root.appendChild(legend);

        if (!a.records.length) {
            root.appendChild(html('div', 'mtl-note', w.none));
            return a;
        }

        var state = container.__miaoshaTimeline;
        if (!state) {
            state = {onlySales: opts.onlySales === true,
                order: opts.order === 'value' ? 'value' : 'worker'};
            container.__miaoshaTimeline = state;
        }
        var bar = html('div', 'mtl-controls');
        var cb = document.createElement('input');
        cb.type = 'checkbox';
        cb.checked = state.onlySales;
        cb.className = 'mtl-only-sales';
        var lab = html('label');
        lab.appendChild(cb);
        lab.appendChild(document.createTextNode(' ' + w.onlySales));
        var sel = document.createElement('select');
        sel.className = 'mtl-order';
        [['worker', w.byWorker], ['value', w.byValue]].forEach(function (o) {
            var op = html('option', null, o[1]);
            op.value = o[0];
            sel.appendChild(op);
        });
        sel.value = state.order;
        bar.appendChild(lab);
        bar.appendChild(document.createTextNode(' · ' + w.lanes + ': '));
        bar.appendChild(sel);
        root.appendChild(bar);
        var body = html('div', 'mtl-body');
        root.appendChild(body);
        var redraw = function () { drawBody(body, root, a, w, state, container); };
        cb.addEventListener('change', function () {
            state.onlySales = cb.checked;
            redraw();
        });
        sel.addEventListener('change', function () {
            state.order = sel.value;
            redraw();
        });
        redraw();
        return a;
    }

    global.miaoshaTimeline = {render: render, analyse: analyse, words: WORDS};
})(typeof window !== 'undefined' ? window : this);
