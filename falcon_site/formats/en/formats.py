"""Date formats of the admin's pages (`FORMAT_MODULE_PATH`): to the second, with the time zone.

Django's own English formats stop at the minute (`N j, Y, P`); an operator comparing a page with
the logs needs seconds and the zone (Django's `date` format characters).
"""
DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s T"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
