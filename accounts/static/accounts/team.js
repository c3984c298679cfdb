// The skills matrix as a grid (the ARIA grid pattern), with a save per cell and undo.
//
// Loaded with defer on the team pages only, after inbox.js (which focuses [data-search]
// on "/" and writes the .messages live region). Without this file the matrix is a table of
// forms, one per row (form[data-team-form], its cells tied to it with the form attribute),
// and everything below is only a faster way through the same routes:
//   table[data-team-grid]  one tab stop; arrows, Home/End and Ctrl+Home/End move between
//                          cells; Enter, F2 or a digit edits a cell; Enter saves it; Esc
//                          cancels; Space selects the row's worker for the bulk grant
//   a cell saved           a fetch POST of that one field to its row's form action, which
//                          answers JSON (Accept: application/json); anything else (signed
//                          out, a password to confirm) posts the row's form the plain way
//   z, Ctrl+Z, Undo        posts the values the last save replaced back to the same route
//   [data-team-search]     filters the rows shown as one types (Search asks the server)
(function () {
  "use strict";

  var grid = document.querySelector("table[data-team-grid]");
  var region = document.querySelector(".messages[aria-live]");
  var active = null;       // the cell holding the grid's one tab stop
  var editing = null;      // {cell, widget, original} while a cell is edited
  var lastUndo = null;     // {action, form, fields, label} of the last change saved
  var autofocused = null;  // a widget the server focused: its cell takes focus instead

  function isTyping(el) {
    return el && (el.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName));
  }

  // The status message, with an Undo button when the change can be undone.
  function say(text, kind, undoable) {
    if (!region) return;
    region.textContent = "";
    var p = document.createElement("p");
    p.className = "message " + (kind || "info");
    p.textContent = text;
    if (undoable) {
      var button = document.createElement("button");
      button.type = "button";
      button.className = "secondary";
      button.setAttribute("data-team-undo", "");
      button.textContent = "Undo";
      var chip = document.createElement("kbd");
      chip.setAttribute("aria-hidden", "true");
      chip.textContent = "z";
      button.appendChild(chip);
      p.appendChild(button);
    }
    region.appendChild(p);
  }

  // Posting -------------------------------------------------------------------------------
  function rowForm(row) {
    return document.getElementById("row-" + row.getAttribute("data-worker"));
  }

  // POST fields (name: value) as the row's form would; resolve to {ok, body}, or to null
  // when the answer is not the view's JSON (then the row's form is posted the plain way).
  function post(form, fields, fallback) {
    var data = new FormData();
    ["csrfmiddlewaretoken", "after", "q"].forEach(function (name) {
      if (form.elements[name]) data.append(name, form.elements[name].value);
    });
    Object.keys(fields).forEach(function (name) { data.append(name, fields[name]); });
    return window.fetch(form.action, {
      method: "POST", body: data, credentials: "same-origin",
      headers: {"Accept": "application/json"}
    }).then(function (response) {
      var json = (response.headers.get("Content-Type") || "").indexOf("application/json") === 0;
      if (response.redirected || (!json && (response.status === 401 || response.status === 403))) {
        // Signed out, or a password to confirm first: the page's own flow resumes the post.
        fallback();
        return null;
      }
      if (!json) {
        throw new Error("the server answered " + response.status);
      }
      return response.json().then(function (body) { return {ok: response.ok, body: body}; });
    });
  }

  function widgetOf(cell) {
    return cell.querySelector("select, input:not([type=checkbox])");
  }

  function showError(cell, widget, text) {
    var id = widget.id + "-error", p = document.getElementById(id);
    if (!p) {
      p = document.createElement("p");
      p.className = "field-error";
      p.id = id;
      cell.appendChild(p);
    }
    p.textContent = text;
    widget.setAttribute("aria-invalid", "true");
    widget.setAttribute("aria-describedby", id);
    cell.closest("tr").classList.add("invalid");
  }

  function clearError(cell, widget) {
    var p = document.getElementById(widget.id + "-error");
    if (p) p.remove();
    widget.removeAttribute("aria-invalid");
    widget.removeAttribute("aria-describedby");
    var row = cell.closest("tr");
    if (!row.querySelector("[aria-invalid=true]")) row.classList.remove("invalid");
  }

  // Save one cell's value; a refused value stays in the cell, in edit mode, with why.
  function saveCell(cell, widget) {
    var row = cell.closest("tr"), form = rowForm(row), fields = {};
    fields[widget.name] = widget.value;
    cell.classList.add("saving");
    cell.setAttribute("aria-busy", "true");
    post(form, fields, function () {
      form.elements.focus.value = widget.name;
      form.submit();
    }).then(function (result) {
      cell.classList.remove("saving");
      cell.removeAttribute("aria-busy");
      if (!result) return;
      var body = result.body;
      if (!result.ok) {
        showError(cell, widget, (body.errors && body.errors[widget.name]) || body.message);
        say(body.message, "error");
        startEdit(cell, null, widget.value);
        return;
      }
      widget.setAttribute("data-saved", widget.value);
      clearError(cell, widget);
      cell.classList.add("saved");
      var undoable = Object.keys(body.undo || {}).length > 0;
      if (undoable) {
        lastUndo = {form: form, fields: body.undo, label: body.undo_label};
      }
      say(body.message, undoable ? "success" : "info", undoable);
    }).catch(function (error) {
      cell.classList.remove("saving");
      cell.removeAttribute("aria-busy");
      var text = "Not saved: " + error.message + ". The value stays in the cell; " +
        "press Enter to try again.";
      showError(cell, widget, text);
      say(text, "error");
    });
  }

  function undo() {
    if (!lastUndo) {
      say("Nothing to undo: no change saved on this page yet (or it was undone).", "info");
      return;
    }
    var change = lastUndo, from = document.activeElement;
    lastUndo = null;
    post(change.form, change.fields, function () {
      Object.keys(change.fields).forEach(function (name) {
        var input = document.createElement("input");
        input.type = "hidden";
        input.name = name;
        input.value = change.fields[name];
        change.form.appendChild(input);
      });
      change.form.submit();
    }).then(function (result) {
      if (!result) return;
      if (!result.ok) {
        lastUndo = change;
        say("Not undone: " + result.body.message, "error");
        return;
      }
      var worker = change.form.id.replace("row-", ""), first = null;
      Object.keys(change.fields).forEach(function (name) {
        var widget = document.getElementById("c-" + worker + "-" + name);
        if (!widget) return;
        widget.value = change.fields[name];
        widget.setAttribute("data-saved", widget.value);
        var cell = widget.closest("td");
        clearError(cell, widget);
        if (!first) first = cell;
      });
      say("Undone: " + change.label + ".", "success");
      // Back to the cell changed, from the grid or the status's Undo (gone with it).
      var here = document.activeElement;
      if (first && (grid.contains(from) || (region && region.contains(from)) ||
                    !here || here === document.body)) {
        focusCell(first);
      }
    }).catch(function (error) {
      lastUndo = change;
      say("Not undone: " + error.message + ". Press z to try again.", "error");
    });
  }

  // Navigation ----------------------------------------------------------------------------
  function rows() {
    return Array.prototype.filter.call(grid.tBodies[0].rows, function (row) {
      return !row.hidden;
    });
  }

  function cellsOf(row) {
    return Array.prototype.filter.call(row.children, function (cell) {
      return cell.hasAttribute("data-grid-cell");
    });
  }

  function focusCell(cell) {
    if (active && active !== cell) active.tabIndex = -1;
    active = cell;
    cell.tabIndex = 0;
    cell.focus();
  }

  function move(cell, key, ctrl) {
    var list = rows(), row = cell.closest("tr"), y = list.indexOf(row);
    var x = cellsOf(row).indexOf(cell);
    if (key === "ArrowUp") y = Math.max(y - 1, 0);
    if (key === "ArrowDown") y = Math.min(y + 1, list.length - 1);
    if (key === "ArrowLeft") x = Math.max(x - 1, 0);
    if (key === "ArrowRight") x += 1;
    if (key === "Home") { x = 0; if (ctrl) y = 0; }
    if (key === "End") { x = Infinity; if (ctrl) y = list.length - 1; }
    var cells = cellsOf(list[y]);
    focusCell(cells[Math.min(x, cells.length - 1)]);
  }

  // Editing -------------------------------------------------------------------------------
  function startEdit(cell, key, value) {
    var widget = widgetOf(cell);
    if (!widget) return;
    if (widget === autofocused) autofocused = null;
    if (!editing || editing.cell !== cell) {
      editing = {cell: cell, widget: widget, original: widget.getAttribute("data-saved")};
    }
    cell.classList.add("editing");
    cell.classList.remove("saved");
    widget.tabIndex = 0;
    widget.focus();
    if (value !== undefined && value !== null) {
      widget.value = value;
    } else if (key !== null && key !== undefined) {
      typed(widget, key);
    }
  }

  // What a key typed on a cell puts in it: a digit, nothing (Delete), or the next option
  // whose label starts with the letter (availability).
  function typed(widget, key) {
    if (widget.tagName === "INPUT") {
      widget.value = key === "Delete" || key === "Backspace" ? "" : key;
      return;
    }
    var options = Array.prototype.slice.call(widget.options);
    if (key === "Delete" || key === "Backspace" || key === "-") {
      if (options.some(function (o) { return o.value === ""; })) widget.value = "";
      return;
    }
    var start = widget.selectedIndex;
    for (var i = 1; i <= options.length; i += 1) {
      var option = options[(start + i) % options.length];
      if (option.value === key || option.text.toLowerCase().indexOf(key.toLowerCase()) === 0) {
        widget.value = option.value;
        return;
      }
    }
    say("“" + key + "” is not a value of this cell: " + options.map(function (o) {
      return o.text;
    }).join(", ") + ".", "error");
  }

  // Whether a key typed on a cell edits it: a digit, "-", Delete or Backspace; a letter
  // only where an option starts with it (availability). Other keys stay shortcuts.
  function canType(widget, key) {
    if (/^[0-9-]$/.test(key) || key === "Delete" || key === "Backspace") return true;
    if (widget.tagName !== "SELECT" || !/^[a-z]$/i.test(key)) return false;
    return Array.prototype.some.call(widget.options, function (option) {
      return option.text.toLowerCase().indexOf(key.toLowerCase()) === 0;
    });
  }

  function endEdit(save) {
    if (!editing) return;
    var edit = editing;
    editing = null;
    edit.cell.classList.remove("editing");
    edit.widget.tabIndex = -1;
    if (save && edit.widget.value !== edit.original) {
      saveCell(edit.cell, edit.widget);
    } else if (!save) {
      edit.widget.value = edit.original;
      clearError(edit.cell, edit.widget);
    }
  }

  function toggle(cell) {
    var box = cell.closest("tr").querySelector("input[type=checkbox][name=worker]");
    if (!box) return false;
    box.click();
    return true;
  }

  function onKey(event) {
    if (event.defaultPrevented || event.isComposing) return;
    var key = event.key, ctrl = event.ctrlKey || event.metaKey;
    if (editing && event.target === editing.widget) {
      if (key === "Enter" && !ctrl && !event.altKey) {
        event.preventDefault();
        var cell = editing.cell;
        endEdit(true);
        focusCell(cell);
      } else if (key === "Escape") {
        event.preventDefault();
        var left = editing.cell;
        endEdit(false);
        focusCell(left);
        say("Edit cancelled: the cell keeps its saved value.", "info");
      }
      return;  // Tab leaves the grid (the edit is saved as it loses focus); arrows edit
    }
    var target = event.target;
    if (!target.hasAttribute || !target.hasAttribute("data-grid-cell")) return;
    var handled = true;
    if (/^(Arrow(Up|Down|Left|Right)|Home|End)$/.test(key) && !event.altKey) {
      move(target, key, ctrl);
    } else if ((key === "z" && !ctrl && !event.altKey) || ((key === "z" || key === "Z") && ctrl)) {
      undo();
    } else if (ctrl || event.altKey) {
      handled = false;
    } else if (key === " " && !widgetOf(target)) {
      handled = toggle(target);
    } else if (key === "Enter" && target.classList.contains("pick")) {
      handled = toggle(target);
    } else if ((key === "Enter" || key === "F2" || key === " ") && widgetOf(target)) {
      startEdit(target, null);
    } else if (widgetOf(target) && canType(widgetOf(target), key)) {
      startEdit(target, key);
    } else {
      handled = false;
    }
    if (handled) event.preventDefault();
  }

  function setUp() {
    grid.setAttribute("role", "grid");
    var first = null, focusTo = null;
    Array.prototype.forEach.call(grid.tBodies[0].rows, function (row) {
      Array.prototype.forEach.call(row.children, function (cell) {
        if (cell.classList.contains("action")) return;
        cell.setAttribute("data-grid-cell", "");
        if (cell.tagName === "TD") cell.setAttribute("role", "gridcell");
        cell.tabIndex = -1;
        if (!first && cell.classList.contains("cell")) first = cell;
        var widget = cell.querySelector("select, input");
        if (!widget) return;
        widget.tabIndex = -1;
        if (widget.type !== "checkbox") widget.setAttribute("data-saved", widget.value);
        if (widget.hasAttribute("autofocus")) {
          widget.removeAttribute("autofocus");
          autofocused = widget;
          focusTo = cell;
        }
      });
    });
    var start = focusTo || first || grid.querySelector("[data-grid-cell]");
    if (!start) return;
    active = start;
    start.tabIndex = 0;
    if (focusTo) {
      var refused = autofocused.getAttribute("aria-invalid") === "true";
      if (refused) {
        startEdit(focusTo, null);
      } else {
        focusCell(focusTo);
      }
    } else if ((!document.activeElement || document.activeElement === document.body) &&
               !document.querySelector("[autofocus]:not(dialog [autofocus])")) {
      focusCell(start);  // unless the page focuses a field of its own (a refused form's)
    }

    grid.addEventListener("keydown", onKey);
    grid.addEventListener("focusin", function (event) {
      var target = event.target;
      if (target.hasAttribute("data-grid-cell")) {
        if (active !== target) focusCell(target);
        return;
      }
      var cell = target.closest("[data-grid-cell]");
      if (!cell) return;
      if (target === autofocused) {  // the browser's autofocus, after this file ran
        autofocused = null;
        if (target.getAttribute("aria-invalid") !== "true") focusCell(cell);
        return;
      }
      if (target.type === "checkbox") {
        focusCell(cell);  // clicked: the cell keeps the focus, Space toggles
      } else if (!editing || editing.widget !== target) {
        if (editing) endEdit(true);
        if (active !== cell) { active.tabIndex = -1; active = cell; cell.tabIndex = 0; }
        startEdit(cell, null);  // clicked into: edit it
      }
    });
    grid.addEventListener("focusout", function (event) {
      if (editing && event.target === editing.widget &&
          !(event.relatedTarget && editing.cell.contains(event.relatedTarget))) {
        endEdit(true);
      }
    });
    grid.addEventListener("change", function (event) {
      if (event.target.name === "worker") picked();
    });
    picked();
  }

  // The bulk grant: rows checked and how many.
  function picked() {
    var boxes = grid.querySelectorAll("input[type=checkbox][name=worker]"), count = 0;
    boxes.forEach(function (box) {
      box.closest("tr").classList.toggle("picked", box.checked);
      if (box.checked) count += 1;
    });
    var note = document.querySelector("[data-team-selected]");
    if (note) note.textContent = count ? count + " selected" : "none selected yet";
  }

  // Search: the rows of this page whose worker matches, as one types.
  function filter(box) {
    var query = box.value.trim().toLowerCase(), all = grid.tBodies[0].rows, shown = 0;
    Array.prototype.forEach.call(all, function (row) {
      var text = row.querySelector("th[scope=row]").textContent.toLowerCase();
      row.hidden = query !== "" && text.indexOf(query) === -1;
      if (!row.hidden) shown += 1;
    });
    var status = document.querySelector("[data-team-search-status]");
    if (status) {
      status.textContent = query ? shown + " of " + all.length + " workers on this page " +
        "match; Search looks through every page." : "";
    }
    if (active && active.closest("tr").hidden) {
      var first = rows()[0];
      if (first) {
        var x = cellsOf(active.closest("tr")).indexOf(active);
        active.tabIndex = -1;
        active = cellsOf(first)[x];
        active.tabIndex = 0;
      }
    }
  }

  function start() {
    if (grid) setUp();
    var box = document.querySelector("[data-team-search]");
    if (box && grid) {
      box.addEventListener("input", function () { filter(box); });
      box.addEventListener("keydown", function (event) {
        if (event.key === "ArrowDown" && active && !active.closest("tr").hidden) {
          event.preventDefault();
          focusCell(active);
        }
      });
      if (box.value) filter(box);
    }
    document.addEventListener("click", function (event) {
      if (event.target.closest && event.target.closest("[data-team-undo]")) undo();
    });
    // z and Ctrl+Z outside the grid too (not while typing: a field keeps its own undo).
    document.addEventListener("keydown", function (event) {
      if (event.defaultPrevented || !grid || isTyping(event.target)) return;
      if (document.querySelector("dialog[open]")) return;
      var ctrl = event.ctrlKey || event.metaKey;
      if ((event.key === "z" && !ctrl && !event.altKey) || ((event.key === "z" || event.key === "Z") && ctrl)) {
        event.preventDefault();
        undo();
      }
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
