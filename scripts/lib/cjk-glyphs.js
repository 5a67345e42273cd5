/* cjk-glyphs.js — do a page's Chinese characters draw as characters? For
 * the browser tests (service_live over the DevTools protocol,
 * loadtest_timeline_browser through scripts/lib/browser.sh).
 *
 * Reading the DOM cannot tell: "超卖" is in the text whether the machine
 * has a CJK font or not, and without one Chromium draws every character
 * as the same empty box (□). So each distinct CJK character of an
 * element's text is drawn on a canvas in that element's own font
 * (computed style: the page's font-family list and the fallback the
 * browser picks from it), and the pixels are compared: two different
 * characters must not draw the same image, and none may draw nothing.
 *
 *   miaoshaCjkGlyphs(selector) -> "distinct N" (N >= 2 characters, all
 *   different images), or "missing SELECTOR", "few CHARS" (fewer than two
 *   distinct CJK characters to compare), "blank C", "same AB" (A and B
 *   drew the same image: the boxes).
 *
 * Defines that one global function and nothing else. */
window.miaoshaCjkGlyphs = function (selector) {
    'use strict';
    var e = document.querySelector(selector);
    if (!e)
        return 'missing ' + selector;
    var chars = [];
    Array.from(e.textContent).forEach(function (ch) {
        if (/[\u3400-\u9fff]/.test(ch) && chars.indexOf(ch) < 0)
            chars.push(ch);
    });
    if (chars.length < 2)
        return 'few ' + chars.join('');
    var cs = getComputedStyle(e);
    var c = document.createElement('canvas');
    c.width = c.height = 48;
    var x = c.getContext('2d');
    var seen = {};
    for (var i = 0; i < chars.length; i++) {
        x.clearRect(0, 0, 48, 48);
        x.fillStyle = '#000';
        x.font = cs.fontStyle + ' ' + cs.fontWeight + ' 32px ' + cs.fontFamily;
        x.fillText(chars[i], 4, 36);
        var d = x.getImageData(0, 0, 48, 48).data, h = 0, ink = 0;
        for (var k = 3; k < d.length; k += 4) {
            h = (h * 31 + d[k]) | 0;
            ink += d[k] > 0 ? 1 : 0;
        }
        if (!ink)
            return 'blank ' + chars[i];
        if (Object.prototype.hasOwnProperty.call(seen, h))
            return 'same ' + seen[h] + chars[i];
        seen[h] = chars[i];
    }
    return 'distinct ' + chars.length;
};
