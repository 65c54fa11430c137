# Sourced by the notifiers: the webhook's URL and any token go to curl in a config file only
# this user can read (`curl -K`), never on its command line, where every process of the machine
# could read them in /proc while curl runs.
#
#   secret_curl URL [HEADER ...] -- CURL-ARGS ...
secret_curl() {
  _cfg=$(mktemp "${TMPDIR:-/tmp}/runner-notify.XXXXXX")
  chmod 600 "$_cfg"
  # curl's config syntax: a quoted value, its backslashes and quotes escaped.
  _quote() { printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g'; }
  printf 'url = "%s"\n' "$(_quote "$1")" >"$_cfg"
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    printf 'header = "%s"\n' "$(_quote "$1")" >>"$_cfg"
    shift
  done
  [ $# -gt 0 ] && shift
  _status=0
  curl -K "$_cfg" "$@" || _status=$?
  rm -f "$_cfg"
  return $_status
}
