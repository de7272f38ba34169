#!/bin/sh
# Payroll job D (workdays): post the day's payroll to the ledger, payroll/DATE/posted
# under the agent's work directory. Usage: post.sh YYYY-MM-DD
set -eu
day=${1:?usage: post.sh YYYY-MM-DD}
mkdir -p "payroll/$day"
sleep 1
echo "posted $day at $(date -u +%Y-%m-%dT%H:%M:%SZ)" > "payroll/$day/posted"
echo "D posted $day to $(pwd)/payroll/$day/posted"
