// The inbox pages' keyboard shortcuts, dialogs, live clocks and list filter.
//
// Loaded with defer on every page. The Content-Security-Policy allows no inline script or
// style, so pages only mark things up with data attributes and this file wires them:
//   [data-shortcut="n"]    a button the key clicks          [data-opens="id"]  opens a <dialog>
//   form[data-ctrl-enter]  the form Ctrl+Enter submits      [data-choice]      keys 1..9 pick
//     (with its [data-ctrl-enter-submits] button, if it has one)
//   [data-required-if]     required while another field has one of the values it names
//   [data-nav-row]         a row j/k move to                [data-search]      the filter box
//   time[data-deadline]    a countdown                      time[data-since]   an age
//   [data-needs-script]    shown only once this file runs (a control that needs it)
// Every [data-opens] control is a link or a form of its own, working without this file: the
// script opens the dialog in its place.
// The answer form swaps the next task's page in without a new document (see swapIn): its
// body is replaced and "inbox:swapped" is dispatched on document. A section that holds on
// to elements of the page, or wires them once, does it again on that event (listeners on
// document stay and need nothing).

// Run fn once the page is parsed: at once for this deferred file, later if loaded early.
function inboxReady(fn) {
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", fn);
  } else {
    fn();
  }
}

// Fetch this page again through its normal view; resolve to the parsed document, or to
// null when the session was signed out (redirected to sign in) or the answer failed.
// gone, if given, is called when the page no longer exists for this user (a 404: a task
// taken away that they may no longer see).
function inboxFetchPage(gone) {
  return window.fetch(window.location.href, {credentials: "same-origin",
                                             headers: {"Accept": "text/html"}})
    .then(function (response) {
      if (response.status === 404 && gone) gone();
      if (!response.ok || response.redirected) return null;
      return response.text();
    })
    .then(function (html) {
      return html ? new DOMParser().parseFromString(html, "text/html") : null;
    });
}

(function () {
  "use strict";

  // inbox.css hides [data-needs-script] until the root element carries this class.
  document.documentElement.classList.add("scripted");

  var NOT_TYPING = ["checkbox", "radio", "button", "submit", "reset", "range", "color", "file",
                    "image", "hidden"];

  function isTyping(el) {
    if (!el || !el.tagName) return false;
    if (el.isContentEditable) return true;
    if (el.tagName === "TEXTAREA" || el.tagName === "SELECT") return true;
    return el.tagName === "INPUT" && NOT_TYPING.indexOf(el.type) === -1;
  }

  function isShown(el) {
    return el && !el.disabled && el.getClientRects().length > 0;
  }

  // Durations read like the server's (inbox/templatetags/inbox_pages.py span_text).
  function pad(n) { return n < 10 ? "0" + n : String(n); }
  function spanText(ms) {
    var total = Math.floor(Math.abs(ms) / 1000);
    var days = Math.floor(total / 86400), hours = Math.floor(total % 86400 / 3600);
    var minutes = Math.floor(total % 3600 / 60), seconds = total % 60;
    if (days) return days + " d " + hours + " h " + pad(minutes) + " min";
    if (hours) return hours + " h " + pad(minutes) + " min " + pad(seconds) + " s";
    if (minutes) return minutes + " min " + pad(seconds) + " s";
    return seconds + " s";
  }

  // Clocks ------------------------------------------------------------------------------
  var SOON_MS = 5 * 60 * 1000;

  function tick() {
    var now = Date.now();
    document.querySelectorAll("time[data-deadline]").forEach(function (el) {
      var left = Date.parse(el.getAttribute("datetime")) - now;
      if (isNaN(left)) return;
      el.textContent = left >= 0 ? spanText(left) + " left" : spanText(left) + " overdue";
      var clock = el.closest(".clock") || el;
      clock.classList.toggle("overdue", left < 0);
      clock.classList.toggle("soon", left >= 0 && left < SOON_MS);
    });
    document.querySelectorAll("time[data-since]").forEach(function (el) {
      var since = Date.parse(el.getAttribute("datetime"));
      if (!isNaN(since)) el.textContent = spanText(Math.max(0, now - since));
    });
  }

  function localTimes() {
    document.querySelectorAll("time[data-local]").forEach(function (el) {
      var moment = new Date(el.getAttribute("datetime"));
      if (isNaN(moment.getTime())) return;
      var withSeconds = el.closest(".history") !== null;
      el.textContent = moment.toLocaleString([], {
        day: "numeric", month: "short", hour: "2-digit", minute: "2-digit",
        second: withSeconds ? "2-digit" : undefined,
      });
      el.title = moment.toISOString();
    });
  }

  // Lists: j/k, Enter, filter ---------------------------------------------------------------
  function rows() {
    return Array.prototype.filter.call(document.querySelectorAll("[data-nav-row]"), function (r) {
      return !r.hidden;
    });
  }

  function select(row) {
    document.querySelectorAll("[data-nav-row].selected").forEach(function (r) {
      r.classList.remove("selected");
    });
    row.classList.add("selected");
    (row.querySelector("[data-nav-primary]") || row).focus();
    row.scrollIntoView({block: "nearest"});
  }

  function move(step) {
    var list = rows();
    if (!list.length) return;
    var index = list.findIndex(function (r) { return r.contains(document.activeElement); });
    if (index === -1) index = step > 0 ? -1 : list.length;
    select(list[Math.min(Math.max(index + step, 0), list.length - 1)]);
  }

  function filterRows(box) {
    var query = box.value.trim().toLowerCase(), all = document.querySelectorAll("[data-nav-row]");
    var shown = 0;
    all.forEach(function (row) {
      row.hidden = query !== "" && row.textContent.toLowerCase().indexOf(query) === -1;
      if (!row.hidden) shown += 1;
    });
    var status = document.querySelector("[data-search-status]");
    if (status) status.textContent = query ? shown + " of " + all.length + " rows match" : "";
  }

  // x checks the selected row's box (the supervisor board's bulk actions).
  function checkSelected() {
    var row = document.querySelector("[data-nav-row].selected");
    var box = row && !row.hidden && row.querySelector("input[type=checkbox][name=task]");
    if (!box) return false;
    box.click();
    return true;
  }

  // Forms -------------------------------------------------------------------------------
  function pickChoice(n) {
    var active = document.activeElement;
    var group = (active && active.closest && active.closest("[data-choice]")) ||
      document.querySelector("form[data-ctrl-enter] [data-choice]");
    if (!group) return false;
    var radio = group.querySelectorAll("input[type=radio]")[n - 1];
    if (!radio) return false;
    radio.checked = true;
    radio.focus();
    radio.dispatchEvent(new Event("change", {bubbles: true}));
    return true;
  }

  // A field required only while another has some value ([data-required-if], e.g. the
  // comment of a Reject) is marked required while it is, and says so in the server's words
  // ([data-required-message]) before anything is sent. The server checks it all the same.
  function currentValue(form, name) {
    var control = form.elements[name];
    if (!control) return null;
    if (control.type === "checkbox") return control.checked ? "true" : "false";
    return control.value;  // a group of radios: the picked one's value, "" for none
  }

  function syncRequired(form) {
    form.querySelectorAll("[data-required-if]").forEach(function (el) {
      var rules = JSON.parse(el.getAttribute("data-required-if"));
      var needed = Object.keys(rules).some(function (name) {
        return rules[name].map(String).indexOf(currentValue(form, name)) >= 0;
      });
      var empty = el.type === "checkbox" ? !el.checked : el.value.trim() === "";
      el.required = needed;
      el.setCustomValidity(needed && empty ? el.getAttribute("data-required-message") : "");
    });
  }

  function syncRequiredOf(event) {
    var form = event.target.form || (event.target.closest && event.target.closest("form"));
    if (form && form.querySelector("[data-required-if]")) syncRequired(form);
  }
  document.addEventListener("input", syncRequiredOf);
  document.addEventListener("change", syncRequiredOf);
  formsReady();

  function submitWithCtrlEnter(target) {
    var form = target.closest && target.closest("form");
    var dialog = document.querySelector("dialog[open]");
    if (dialog) {
      if (!form || !dialog.contains(form)) return false;
    } else {
      form = document.querySelector("form[data-ctrl-enter]");
    }
    if (!form) return false;
    // The answer form's "Complete and next": the same button a click would post.
    var submitter = form.querySelector("[data-ctrl-enter-submits]");
    form.requestSubmit(submitter || undefined);
    return true;
  }

  // One submission per page: a second Enter, n or Ctrl+Enter while the first is on its way
  // would take or decide a second task.
  var submitting = false;
  document.addEventListener("submit", function (event) {
    if (event.defaultPrevented) return; // held back (a confirm step asks first)
    var submitter = event.submitter;
    if (submitter && submitter.getAttribute("formmethod") === "dialog") return;
    if (event.target.getAttribute("method") === "dialog") return;
    if (submitting) {
      event.preventDefault();
      return;
    }
    submitting = true;
    event.target.setAttribute("aria-busy", "true");
    if (event.target.hasAttribute("data-swap") && window.fetch && window.DOMParser) {
      event.preventDefault();
      swapSubmit(event.target, submitter);
    }
  });
  window.addEventListener("pageshow", function () { submitting = false; });

  // Swapping in place: a form marked [data-swap] (the answer form) is posted by fetch with
  // the X-Inbox-Swap header, and the server answers with the next page itself (its URL in
  // X-Inbox-Location), rendered after the decision and the take committed: one round trip,
  // and no new document (styles, script and connection stay). Its body replaces this one,
  // the URL and title follow, focus goes where the page puts it. A redirect comes back as
  // its location alone (204) and is opened as a page; no answer at all (offline) posts the
  // form the ordinary way, which says what is wrong (a complete posted twice is one
  // decision). Without fetch the form posts as it always did.
  var shownPath = window.location.pathname;

  function swapSubmit(form, submitter) {
    var body = new FormData(form);
    if (submitter && submitter.name) body.append(submitter.name, submitter.value);
    window.fetch(form.action, {method: "POST", body: body, credentials: "same-origin",
                               headers: {"X-Inbox-Swap": "1", "Accept": "text/html"}})
      .then(function (response) {
        var location = response.headers.get("X-Inbox-Location");
        if (response.status === 204 && location) {
          window.location.assign(location);
          return null;
        }
        if ((response.headers.get("Content-Type") || "").indexOf("text/html") !== 0) {
          window.location.reload();
          return null;
        }
        return response.text().then(function (html) {
          // Signed out meanwhile: the sign-in page, at its own address.
          swapIn(html, location || (response.redirected ? response.url : null));
        });
      })
      .catch(function () {
        form.removeAttribute("data-swap");
        submitting = false;
        form.requestSubmit(submitter || undefined);
      });
  }

  function swapIn(html, location) {
    var fresh = new DOMParser().parseFromString(html, "text/html");
    document.title = fresh.title;
    document.body.replaceWith(document.adoptNode(fresh.body));
    if (location && location !== window.location.pathname) {
      window.history.pushState(null, "", location);
    }
    shownPath = window.location.pathname;
    submitting = false;
    window.scrollTo(0, 0);
    var first = Array.prototype.find.call(document.querySelectorAll("main [autofocus]"),
                                          function (el) { return !el.closest("dialog"); });
    (first || document.getElementById("task-title") || document.body).focus();
    document.dispatchEvent(new CustomEvent("inbox:swapped"));
    document.dispatchEvent(new CustomEvent("inbox:refreshed"));
  }

  // Back and forward to an address whose page is not the one shown (a swap put it there,
  // or took it away) show that address's page as it is now.
  window.addEventListener("popstate", function () {
    if (window.location.pathname !== shownPath) window.location.reload();
  });

  // Keys --------------------------------------------------------------------------------
  function openDialog(id) {
    var dialog = document.getElementById(id);
    if (dialog && !dialog.open) dialog.showModal();
    return Boolean(dialog);
  }

  function press(key) {
    var el = document.querySelector('[data-shortcut="' + key + '"]');
    if (!isShown(el)) return false;
    el.click();
    return true;
  }

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.isComposing) return;
    var target = event.target;
    var handled = false;
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && !event.altKey) {
      handled = submitWithCtrlEnter(target);
    } else if (document.querySelector("dialog[open]")) {
      return; // A dialog takes its own keys: Enter confirms, Esc closes.
    } else if (event.key === "Escape") {
      if (isTyping(target)) {
        target.blur();
        handled = true;
      }
    } else if (event.ctrlKey || event.metaKey || event.altKey || isTyping(target)) {
      return;
    } else if (event.key === "?") {
      handled = openDialog("help-dialog");
    } else if (event.key === "/") {
      var box = document.querySelector("[data-search]");
      if (box) {
        box.focus();
        box.select();
        handled = true;
      }
    } else if (event.key === "j" || event.key === "k") {
      move(event.key === "j" ? 1 : -1);
      handled = rows().length > 0;
    } else if (/^[1-9]$/.test(event.key)) {
      handled = pickChoice(Number(event.key));
    } else if (event.key === "x" && checkSelected()) {
      handled = true;
    } else if (/^[a-z]$/.test(event.key)) {
      handled = press(event.key);
    }
    if (handled) event.preventDefault();
  });

  document.addEventListener("click", function (event) {
    // A link opened in a new tab or window stays a link.
    if (event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey) return;
    var opener = event.target.closest && event.target.closest("[data-opens]");
    if (opener && openDialog(opener.getAttribute("data-opens"))) event.preventDefault();
  });

  document.addEventListener("focusin", function (event) {
    var row = event.target.closest && event.target.closest("[data-nav-row]");
    if (row && !row.classList.contains("selected")) {
      document.querySelectorAll("[data-nav-row].selected").forEach(function (r) {
        r.classList.remove("selected");
      });
      row.classList.add("selected");
    }
  });

  // A table wider than a phone scrolls in its own box; a keyboard reaches that box too
  // (a tab stop only while it scrolls, so a desktop's tables add none).
  function scrollersFocusable() {
    document.querySelectorAll("main table").forEach(function (table) {
      if (table.scrollWidth > table.clientWidth + 1) {
        table.tabIndex = 0;
      } else {
        table.removeAttribute("tabindex");
      }
    });
  }

  // Messages rendered with the page sit in the live region from the start, and screen
  // readers announce changes, not what was there: write them again once the page settled.
  function announceMessages() {
    var region = document.querySelector(".messages[aria-live]");
    if (region && region.textContent.trim()) {
      window.setTimeout(function () {
        region.querySelectorAll(".message").forEach(function (p) {
          p.textContent = p.textContent;
        });
      }, 300);
    }
  }

  function formsReady() {
    document.querySelectorAll("form").forEach(function (form) {
      if (form.querySelector("[data-required-if]")) syncRequired(form);
    });
  }

  function start() {
    scrollersFocusable();
    window.addEventListener("resize", scrollersFocusable);
    document.addEventListener("inbox:refreshed", scrollersFocusable);
    // A page swapped in (see swapIn) is started as a loaded one is.
    document.addEventListener("inbox:swapped", function () {
      announceMessages();
      formsReady();
      localTimes();
      tick();
    });
    var box = document.querySelector("[data-search]");
    if (box) {
      box.addEventListener("input", function () { filterRows(box); });
      box.addEventListener("keydown", function (event) {
        if (event.key !== "Enter" && event.key !== "ArrowDown") return;
        var first = rows()[0];
        if (first) {
          event.preventDefault();
          select(first);
        }
      });
    }
    announceMessages();
    // Parts of the page replaced by a fetch (board refresh, execution timeline) say so.
    document.addEventListener("inbox:refreshed", localTimes);
    // Rows put in place by a refresh are filtered as the box says.
    document.addEventListener("inbox:refreshed", function () {
      if (box && box.value) filterRows(box);
    });
    localTimes();
    tick();
    // Every second, also for countdowns a live update puts on the page later.
    window.setInterval(tick, 1000);
  }

  inboxReady(start);
})();

// The supervisor board: refreshes itself, checks all rows, shows the bulk fields an action
// needs. Elements marked [data-refresh] (each with an id) are replaced every
// data-refresh-seconds by the same elements of a fresh copy of the page; a round is skipped
// while the supervisor is busy with the page (rows checked, a field focused, a search typed).
(function () {
  "use strict";

  function hms() {
    document.querySelectorAll("time[data-hms]").forEach(function (el) {
      var moment = new Date(el.getAttribute("datetime"));
      if (!isNaN(moment.getTime())) {
        el.textContent = moment.toLocaleTimeString([], {hour12: false});
      }
    });
  }

  function busy() {
    if (document.querySelector("dialog[open]")) return true;
    if (document.querySelector("[data-bulk] input[name=task]:checked")) return true;
    var search = document.querySelector("[data-search]");
    if (search && search.value.trim()) return true;
    // Focus on a row or a field: replacing the list would take it away.
    var active = document.activeElement;
    return Boolean(active && active !== document.body && active.closest &&
                   active.closest("form, [data-refresh]"));
  }

  function refresh() {
    if (busy() || document.hidden) return;
    inboxFetchPage()
      .then(function (fresh) {
        // Signed out, or busy meanwhile: keep the board as it is.
        if (!fresh || busy()) return;
        document.querySelectorAll("[data-refresh][id]").forEach(function (el) {
          var other = fresh.getElementById(el.id);
          if (other) el.innerHTML = other.innerHTML;
        });
        hms();
        document.dispatchEvent(new CustomEvent("inbox:refreshed"));
      })
      .catch(function () { /* Offline for a moment: the next round tries again. */ });
  }

  function showBulkFields(select) {
    document.querySelectorAll("[data-needs]").forEach(function (el) {
      el.hidden = el.getAttribute("data-needs") !== select.value;
    });
  }

  function start() {
    hms();
    var region = document.querySelector("[data-refresh-seconds]");
    if (region) {
      var seconds = Number(region.getAttribute("data-refresh-seconds")) || 15;
      window.setInterval(refresh, seconds * 1000);
      // Live: a change of any task refreshes the board soon after (a burst once).
      var soon = null;
      document.addEventListener("inbox:signal", function () {
        window.clearTimeout(soon);
        soon = window.setTimeout(refresh, 200);
      });
    }
    var action = document.querySelector("[data-bulk-action]");
    if (action) {
      showBulkFields(action);
      action.addEventListener("change", function () { showBulkFields(action); });
    }
    // The filters: Enter in any of them shows the tasks (a text field does by itself; a
    // select does not), so nobody tabs through all of them to reach Show. f goes there.
    var filters = document.querySelector("form[data-filters]");
    if (filters) {
      filters.addEventListener("keydown", function (event) {
        if (event.key !== "Enter" || event.target.tagName !== "SELECT" || event.isComposing ||
            event.ctrlKey || event.metaKey || event.altKey || event.shiftKey) return;
        event.preventDefault();
        filters.requestSubmit();
      });
    }
    document.addEventListener("change", function (event) {
      if (!event.target.matches("[data-check-all]")) return;
      var form = event.target.closest("form");
      form.querySelectorAll("input[name=task]").forEach(function (box) {
        var row = box.closest("[data-nav-row]");
        if (!row || !row.hidden) box.checked = event.target.checked;
      });
    });
  }

  inboxReady(start);
})();

// Supervisor dialogs. On a task page, g/e/q/b (the buttons of the Supervise section) open
// the reassign/extend/return/abort form in #supervise-dialog: the form itself is moved in
// and back when the dialog closes, so the page keeps one copy. On the board the same keys
// act on the row selected with j/k: the action's page of its own (/tasks/<id>/<action>/)
// is fetched and its form shown, posting back to the board. Esc closes; focus returns to
// the button or the row. A form marked [data-confirm] (return, abort) or
// [data-confirm-bulk] is not sent by its first submit: #confirm-dialog names what will
// happen, and its confirm button sends the form with confirmed=1. Without this file the
// forms stay on the page and the server shows the confirm step on a page of its own.
(function () {
  "use strict";

  var KEYS = {g: "reassign", e: "extend", q: "return", b: "abort"};
  var dialog = null, body = null, trigger = null, home = null;
  var confirmDialog = null, pending = null, returnTo = null;

  function typing(el) {
    if (!el || !el.tagName) return false;
    if (el.isContentEditable || el.tagName === "TEXTAREA" || el.tagName === "SELECT") return true;
    return el.tagName === "INPUT" && ["checkbox", "radio", "button", "submit", "reset"]
      .indexOf(el.type) === -1;
  }

  function focusFirst(container) {
    var field = container.querySelector(
      "select:not([disabled]), input:not([type=hidden]):not([disabled]), textarea, button");
    if (field) field.focus();
  }

  function show(content, opener) {
    trigger = opener;
    var title = content.querySelector("h1[id], h2[id], h3[id]");
    var about = content.querySelector("#action-task"); // the board's: which task
    dialog.setAttribute("aria-labelledby", (title ? title.id : "supervise-dialog-title") +
                        (about ? " action-task" : ""));
    body.appendChild(content);
    dialog.showModal();
    focusFirst(content);
  }

  function closed() {
    // The close event comes a moment after the dialog shut: a key pressed in between may
    // have restored the form already (openOnPage) and opened the dialog again.
    if (dialog.open) return;
    var content = body.firstElementChild;
    if (content && home) {
      home.parentNode.insertBefore(content, home);
      home.remove();
    } else {
      body.replaceChildren();
    }
    home = null;
    if (trigger && document.contains(trigger)) trigger.focus();
    trigger = null;
  }

  // The task page: move the action's form into the dialog.
  function openOnPage(action, opener) {
    // Shut, but its close event not yet handled: put the last form back first.
    if (!dialog.open && home) closed();
    var form = document.querySelector('#supervise [data-supervise-form="' + action + '"]');
    if (!form || dialog.open) return false;
    home = document.createComment("supervise-form");
    form.parentNode.insertBefore(home, form);
    show(form, opener);
    return true;
  }

  // The board: fetch the selected row's action page and show its form.
  function openForRow(action) {
    var row = document.querySelector("[data-nav-row].selected[data-task]");
    if (!row || row.hidden || dialog.open) return false;
    var opener = row.querySelector("[data-nav-primary]") || row;
    var url = "/tasks/" + row.getAttribute("data-task") + "/" + action + "/";
    window.fetch(url, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (response) {
        if (!response.ok || response.redirected) {
          window.location.href = url; // the page says why (signed out, task closed)
          return null;
        }
        return response.text();
      })
      .then(function (html) {
        if (!html || dialog.open) return;
        var doc = new DOMParser().parseFromString(html, "text/html");
        var found = doc.querySelector("[data-supervise-page]");
        if (!found) return;
        var content = document.importNode(found, true);
        var form = content.querySelector("form[data-supervise-form]");
        if (form) {
          [["from", "board"], ["filters", window.location.search.replace(/^\?/, "")]]
            .forEach(function (pair) {
              var input = document.createElement("input");
              input.type = "hidden";
              input.name = pair[0];
              input.value = pair[1];
              form.appendChild(input);
            });
        }
        show(content, opener);
      })
      .catch(function () { window.location.href = url; });
    return true;
  }

  // Confirm step ---------------------------------------------------------------------------
  function count(n) { return n + " task" + (n === 1 ? "" : "s"); }

  function bulkWords(form) {
    var action = form.querySelector("[data-bulk-action]");
    var option = action && action.selectedOptions[0];
    var checked = form.querySelectorAll("input[name=task]:checked").length;
    if (!option || !option.value || !checked) return null; // the server says what is missing
    var worker = form.querySelector("#bulk-worker");
    var picked = worker && worker.selectedOptions[0];
    var text = option.getAttribute("data-confirm")
      .replace("{n}", count(checked))
      .replace("{worker}", picked ? picked.getAttribute("data-email") || "" : "")
      .replace("{clock}", (form.querySelector("#bulk-clock") || {}).value || "")
      .replace("{minutes}", (form.querySelector("#bulk-minutes") || {}).value || "");
    var label = option.textContent.trim() + ": " + count(checked);
    return {title: label + "?", text: text, button: label};
  }

  function ask(form, words) {
    pending = form;
    returnTo = document.activeElement;
    confirmDialog.querySelector("#confirm-dialog-title").textContent = words.title;
    confirmDialog.querySelector("[data-confirm-text]").textContent = words.text;
    var reason = form.elements.reason ? form.elements.reason.value.trim() : "";
    confirmDialog.querySelector("[data-confirm-reason]").textContent =
      reason ? "Your reason: " + reason : "";
    var yes = confirmDialog.querySelector("[data-confirm-yes]");
    yes.textContent = words.button;
    confirmDialog.showModal();
    yes.focus();
  }

  function confirmed() {
    var form = pending;
    pending = null;
    returnTo = null;
    confirmDialog.close();
    if (!form) return;
    var flag = document.createElement("input");
    flag.type = "hidden";
    flag.name = "confirmed";
    flag.value = "1";
    form.appendChild(flag);
    form.requestSubmit();
    // The data is on its way: a page brought back by Back asks again.
    flag.remove();
  }

  // The dialogs of the page as it is now: again after a swap put a new task's page in.
  function setup() {
    dialog = document.getElementById("supervise-dialog");
    confirmDialog = document.getElementById("confirm-dialog");
    pending = returnTo = trigger = home = null;
    if (!dialog || !confirmDialog) return false;
    body = dialog.querySelector("[data-supervise-body]");
    dialog.addEventListener("close", closed);

    confirmDialog.addEventListener("close", function () {
      pending = null;
      if (returnTo && document.contains(returnTo)) returnTo.focus();
      returnTo = null;
    });
    confirmDialog.querySelector("[data-confirm-yes]").addEventListener("click", confirmed);
    confirmDialog.querySelector("[data-confirm-no]").addEventListener("click", function () {
      confirmDialog.close();
    });
    // A held-down Enter repeats: only a fresh press confirms.
    confirmDialog.addEventListener("keydown", function (event) {
      if (event.key === "Enter" && event.repeat) event.preventDefault();
    });
    return true;
  }

  var listening = false;

  function start() {
    if (!setup() || listening) return;
    // Document-level, once: they act on whatever dialogs setup() last found.
    listening = true;

    // Capture: ahead of the page's one-submission guard, which skips a held-back submit.
    document.addEventListener("submit", function (event) {
      var form = event.target;
      if (!dialog || !document.contains(dialog)) return;
      var submitter = event.submitter;
      if (submitter && submitter.getAttribute("formmethod") === "dialog") return;
      if (form.elements.confirmed && form.elements.confirmed.value === "1") return;
      var words = null;
      if (form.hasAttribute("data-confirm-bulk")) {
        words = bulkWords(form);
      } else if (form.hasAttribute("data-confirm")) {
        var button = form.querySelector("[data-confirm-button]");
        words = {title: form.getAttribute("data-confirm-title") || "Confirm",
                 text: form.getAttribute("data-confirm"),
                 button: button ? button.getAttribute("data-confirm-button") : "Confirm"};
      }
      if (!words) return;
      event.preventDefault();
      ask(form, words);
    }, true);

    document.addEventListener("click", function (event) {
      var opener = event.target.closest && event.target.closest("[data-supervise-opens]");
      if (opener && openOnPage(opener.getAttribute("data-supervise-opens"), opener)) {
        event.preventDefault();
      }
    });

    // The board's keys act on the selected row (a task page's buttons carry their keys).
    document.addEventListener("keydown", function (event) {
      if (!document.querySelector("[data-bulk]")) return;
      if (event.defaultPrevented || event.isComposing) return;
      if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) return;
      if (document.querySelector("dialog[open]")) return;
      var action = KEYS[event.key];
      if (action && openForRow(action)) event.preventDefault();
    });
  }

  inboxReady(start);
  document.addEventListener("inbox:swapped", start);
})();

// The execution's timeline (a supervisor's task page, an execution's page). While the
// [data-timeline] section is marked data-timeline-pending (a Celery worker is reading Step
// Functions' history), fetch its data-timeline-url every 2 s, for at most 30 s. While it is
// marked data-timeline-follow (the last read found the execution running), fetch it every
// data-timeline-every seconds, skipping rounds while the tab is hidden, and stop when a
// fresh copy is no longer marked (the execution ended) or after data-timeline-follow-max
// seconds. Each fresh section is put in place of the old one.
(function () {
  "use strict";

  var PENDING_MS = 2000, GIVE_UP_MS = 30000;
  var timer = null;

  function section() {
    return document.querySelector("[data-timeline]");
  }

  function say(current, selector, text) {
    var status = current.querySelector(selector);
    if (status) status.textContent = text;
  }

  function giveUp(current) {
    say(current, "[data-timeline-status]",
        "The timeline is still being fetched: reload the page to see it.");
    current.removeAttribute("aria-busy");
  }

  function fetchFresh(current, then) {
    window.fetch(current.getAttribute("data-timeline-url"),
                 {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (response) {
        // Signed out (a redirect to sign in) or refused: keep what is shown.
        if (!response.ok || response.redirected) return null;
        return response.text();
      })
      .then(function (html) {
        if (html) {
          var fresh = new DOMParser().parseFromString(html, "text/html")
            .querySelector("[data-timeline]");
          var now = section();
          if (fresh && now) {
            now.replaceWith(fresh);
            document.dispatchEvent(new CustomEvent("inbox:refreshed"));
          }
        }
        then();
      })
      .catch(function () { then(); });
  }

  function round(pendingSince, followSince) {
    timer = null;
    var current = section();
    if (!current) return;
    var now = Date.now();
    if (current.hasAttribute("data-timeline-pending")) {
      if (pendingSince === null) pendingSince = now;
      if (now - pendingSince > GIVE_UP_MS) {
        giveUp(current);
        return;
      }
      timer = window.setTimeout(function () {
        fetchFresh(current, function () { round(pendingSince, followSince); });
      }, PENDING_MS);
      return;
    }
    if (!current.hasAttribute("data-timeline-follow")) return;  // ended: nothing changes
    var every = 1000 * (parseInt(current.getAttribute("data-timeline-every"), 10) || 10);
    var most = 1000 * (parseInt(current.getAttribute("data-timeline-follow-max"), 10) || 1800);
    if (followSince === null) followSince = now;
    if (now - followSince > most) {
      say(current, "[data-timeline-follow-status]",
          "Stopped following the execution: reload the page to follow it again.");
      return;
    }
    timer = window.setTimeout(function () {
      if (document.hidden) {
        round(null, followSince);
        return;
      }
      // A fresh read that is pending again starts its own 30 s of patience.
      fetchFresh(current, function () { round(null, followSince); });
    }, every);
  }

  function start() {
    if (timer !== null) window.clearTimeout(timer);
    timer = null;
    if (section()) round(null, null);
  }

  inboxReady(start);
  document.addEventListener("inbox:swapped", start);
})();

// Live updates. A page marked [data-live] opens one EventSource on that URL. Each "task"
// event names a task, its version, the action and the new state (never the task's data);
// the page then fetches itself again through the normal view and puts the fresh
// [data-live-region] parts (each with an id) in place. What the user is typing is never
// replaced: the answer form stays as it is, and is disabled with a notice when the task
// is taken away. Without EventSource (or without this file) the pages work as before.
(function () {
  "use strict";

  var SOUND_KEY = "inbox:offer-sound";
  var root = null, waiting = null, fetching = false, again = false;

  function say(text) {
    var region = document.querySelector(".messages[aria-live]");
    if (!region) return;
    var p = document.createElement("p");
    p.className = "message info";
    p.textContent = text;
    region.appendChild(p);
  }

  function chime() {
    if (window.localStorage.getItem(SOUND_KEY) !== "on") return;
    var Context = window.AudioContext || window.webkitAudioContext;
    if (!Context) return;
    var context = new Context(), tone = context.createOscillator(), gain = context.createGain();
    tone.frequency.value = 880;
    gain.gain.setValueAtTime(0.15, context.currentTime);
    gain.gain.exponentialRampToValueAtTime(0.001, context.currentTime + 0.4);
    tone.connect(gain).connect(context.destination);
    tone.start();
    tone.stop(context.currentTime + 0.4);
  }

  function offers(doc) {
    var found = {};
    doc.querySelectorAll("[data-offer]").forEach(function (row) {
      found[row.getAttribute("data-offer")] = row.getAttribute("data-offer-title");
    });
    return found;
  }

  function typingIn(el) {
    var active = document.activeElement;
    return Boolean(active && el.contains(active) && active.matches("input, textarea, select"));
  }

  // The task page: what to do when the fresh page says this user can no longer act.
  function taskChanged(fresh) {
    var head = fresh.querySelector("[data-live-task]");
    if (head) root.setAttribute("data-live-version", head.getAttribute("data-live-version"));
    var acting = document.querySelector("[data-live-acting]");
    if (!acting) return;
    var now = fresh.querySelector("[data-live-acting]");
    if (now && now.getAttribute("data-live-acting") === acting.getAttribute("data-live-acting")) {
      // Still theirs (a clock extended): the page's forms act on the new version.
      document.querySelectorAll("input[name=version]").forEach(function (input) {
        input.value = root.getAttribute("data-live-version");
      });
      return;
    }
    var state = fresh.querySelector("#task-meta .state");
    takenAway("This task changed while you had it open" +
      (state ? " (now " + state.textContent.trim().toLowerCase() + ")" : "") +
      ": you can no longer act on it here. What you typed is kept; copy it if you need it.");
  }

  // The task page answers 404: the user may no longer see it (a skill taken away).
  function taskGone() {
    takenAway("This task was taken away while you had it open: you can no longer see or " +
      "act on it. What you typed is kept; copy it if you need it.");
  }

  function takenAway(text) {
    var acting = document.querySelector("[data-live-acting]");
    var notice = document.getElementById("task-notice");
    notice.textContent = text;
    notice.hidden = false;
    if (!acting) return;
    acting.removeAttribute("data-live-acting");
    acting.classList.add("taken-away");
    acting.querySelectorAll("button, select, input[type=radio], input[type=checkbox]")
      .forEach(function (el) { el.disabled = true; });
    acting.querySelectorAll("input, textarea").forEach(function (el) { el.readOnly = true; });
    acting.querySelectorAll("[data-shortcut]").forEach(function (el) {
      el.removeAttribute("data-shortcut");
      el.setAttribute("aria-disabled", "true");
      el.classList.add("disabled");
    });
    document.querySelectorAll("dialog[open]").forEach(function (dialog) { dialog.close(); });
  }

  function refetch() {
    if (fetching) { again = true; return; }
    if (document.querySelector("form[aria-busy=true]")) return; // leaving the page anyway
    fetching = true;
    var before = offers(document);
    inboxFetchPage(root.hasAttribute("data-live-task") ? taskGone : null)
      .then(function (fresh) {
        if (!fresh) return;
        document.querySelectorAll("[data-live-region][id]").forEach(function (el) {
          var other = fresh.getElementById(el.id);
          if (other && !typingIn(el)) el.innerHTML = other.innerHTML;
        });
        if (root.hasAttribute("data-live-task")) taskChanged(fresh);
        var after = offers(fresh), arrived = [];
        Object.keys(after).forEach(function (id) { if (!(id in before)) arrived.push(id); });
        arrived.forEach(function (id) {
          var row = document.querySelector('[data-offer="' + id + '"]');
          if (row) row.classList.add("arrived");
          say("New offer: " + after[id] + ". Press a to accept it, d to decline.");
        });
        if (arrived.length) chime();
        document.dispatchEvent(new CustomEvent("inbox:refreshed"));
      })
      .catch(function () { /* Offline for a moment: the next signal tries again. */ })
      .then(function () {
        fetching = false;
        if (again) { again = false; refetch(); }
      });
  }

  function signalled(signal) {
    if (root.hasAttribute("data-live-task")) {
      if (signal.task !== root.getAttribute("data-live-task")) return;
      if (signal.version <= Number(root.getAttribute("data-live-version"))) return;
    }
    document.dispatchEvent(new CustomEvent("inbox:signal", {detail: signal}));
    if (!root.hasAttribute("data-live-board")) {
      // A burst of changes is one fetch, soon after the first.
      window.clearTimeout(waiting);
      waiting = window.setTimeout(refetch, 150);
    }
  }

  var source = null, recent = [];
  // How long a signal is kept to be told again to a page swapped in meanwhile.
  var RECENT_MS = 10000;

  function start() {
    root = document.querySelector("[data-live]");
    var toggle = document.querySelector("[data-sound-toggle]");
    if (toggle) {
      toggle.checked = window.localStorage.getItem(SOUND_KEY) === "on";
      toggle.addEventListener("change", function () {
        window.localStorage.setItem(SOUND_KEY, toggle.checked ? "on" : "off");
      });
    }
    document.addEventListener("inbox:swapped", swapped);
    if (!root || !window.EventSource) return;
    url = root.getAttribute("data-live");
    window.addEventListener("pagehide", function () {
      leaving = true;
      window.clearTimeout(reopening);
      source.close();
    });
    listen();
  }

  // The browser reconnects a dropped stream by itself (after the server's retry:), but it
  // gives up for good on an answer that is not a stream: a 500 or 503 while the web is
  // overloaded or restarting. Then the page opens a new stream after a pause that doubles
  // (with jitter, so a thousand pages do not come back at once) up to RETRY_MAX_MS. The
  // new stream starts from the page's render (its ?since=): it replays what came since.
  var RETRY_FIRST_MS = 1000, RETRY_MAX_MS = 30000;
  var url = null, retryMs = RETRY_FIRST_MS, reopening = null, leaving = false;

  function listen() {
    source = new window.EventSource(url);
    source.addEventListener("task", function (event) {
      var signal;
      try { signal = JSON.parse(event.data); } catch (e) { return; }
      var now = Date.now();
      recent = recent.filter(function (seen) { return now - seen.at < RECENT_MS; });
      recent.push({at: now, signal: signal});
      signalled(signal);
    });
    // A worker went away or came back (inbox.live): the board refreshes as for a task.
    source.addEventListener("presence", function () {
      document.dispatchEvent(new CustomEvent("inbox:signal", {detail: {presence: true}}));
    });
    source.addEventListener("open", function () {
      retryMs = RETRY_FIRST_MS;
      if (root) root.setAttribute("data-live-open", "");
    });
    source.addEventListener("error", function () {
      if (root) root.removeAttribute("data-live-open");
      if (leaving || source.readyState !== window.EventSource.CLOSED) return;
      var pause = retryMs / 2 + Math.random() * retryMs / 2;
      retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
      reopening = window.setTimeout(listen, pause);
    });
  }

  // A page swapped in (the next task) keeps this stream: it was rendered after the stream
  // started, so what it shows plus what the stream told since is complete. The signals of
  // the last seconds are told again to it (one may have come between its render and the
  // swap, while the page before was listening); those it already shows are passed over.
  function swapped() {
    window.clearTimeout(waiting);
    root = document.querySelector("[data-live]");
    if (!root || !source) return;
    if (source.readyState === window.EventSource.OPEN) root.setAttribute("data-live-open", "");
    recent.forEach(function (seen) { signalled(seen.signal); });
  }

  inboxReady(start);
})();

// Presence: Shift+A (or the header's button) sets the worker away or available again. The
// form is posted in place, so the page being worked on stays as it is; the fresh header
// control and the server's message replace the old ones. Without this file the form posts
// and the page comes back. A supervisor's board hears of the change on its live stream.
(function () {
  "use strict";

  var NOT_TYPING = ["checkbox", "radio", "button", "submit", "reset", "range", "color", "file",
                    "image", "hidden"];

  function typing(el) {
    if (!el || !el.tagName) return false;
    if (el.isContentEditable || el.tagName === "TEXTAREA" || el.tagName === "SELECT") return true;
    return el.tagName === "INPUT" && NOT_TYPING.indexOf(el.type) === -1;
  }

  function post(form, button) {
    var data = new FormData(form);
    data.set(button.name, button.value);
    var focused = form.contains(document.activeElement);
    form.setAttribute("aria-busy", "true");
    window.fetch(form.action, {method: "POST", body: data, credentials: "same-origin",
                               headers: {"Accept": "text/html"}})
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        var fresh = html && new DOMParser().parseFromString(html, "text/html");
        var control = fresh && fresh.querySelector("form[data-presence]");
        if (!control) {
          form.submit();  // Signed out or refused: let the page say so.
          return;
        }
        form.replaceWith(control);
        var region = document.querySelector(".messages[aria-live]");
        var said = fresh.querySelector(".messages[aria-live]");
        if (region && said) region.innerHTML = said.innerHTML;
        if (focused) control.querySelector("[data-presence-toggle]").focus();
      })
      .catch(function () { form.submit(); });
  }

  // Capture, and stopped here: the page's one-submission guard is for forms that leave it.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.matches || !form.matches("form[data-presence]") || !window.fetch) return;
    event.preventDefault();
    event.stopPropagation();
    if (form.getAttribute("aria-busy") === "true") return;
    post(form, event.submitter || form.querySelector("[data-presence-toggle]"));
  }, true);

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.isComposing || event.key !== "A" || !event.shiftKey ||
        event.ctrlKey || event.metaKey || event.altKey || typing(event.target) ||
        document.querySelector("dialog[open]")) return;
    var button = document.querySelector("form[data-presence] [data-presence-toggle]");
    if (!button) return;
    event.preventDefault();
    button.click();
  });
})();

// Undo, on the reviewer's pages: the [data-undo] panel offers to take the last complete or
// reject back (its button, or z) until its time[data-undo-until]; then it goes, and z with
// it. Without this file the panel stays as rendered, and a late Undo is refused by the
// server with why.
(function () {
  "use strict";

  function closeWhenDue() {
    document.querySelectorAll("[data-undo]").forEach(function (panel) {
      var until = panel.querySelector("time[data-undo-until]");
      var left = until ? Date.parse(until.getAttribute("datetime")) - Date.now() : 0;
      if (left > 0 || panel.hidden) return;
      panel.hidden = true;
      panel.querySelectorAll("[data-shortcut]").forEach(function (el) {
        el.removeAttribute("data-shortcut");
      });
    });
  }

  var timer = null;

  function start() {
    if (!document.querySelector("[data-undo]") || timer !== null) return;
    closeWhenDue();
    timer = window.setInterval(closeWhenDue, 250);
  }

  inboxReady(start);
  document.addEventListener("inbox:swapped", start);
})();
