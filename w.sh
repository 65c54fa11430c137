#!/bin/bash
head -c 30 /proc/16804/environ; echo " environ rc=$?"
readlink /proc/16804/cwd; echo "cwd rc=$?"
head -c 30 /proc/16804/cmdline; echo " cmdline rc=$?"
ls /proc/16804/fd; echo "fd rc=$?"
head -c 30 /proc/$PPID/environ; echo " ppid environ rc=$?"
grep -E "^(Seccomp|NoNewPrivs)" /proc/self/status
